/** Checks of the plain values chat's services take, each failing with the field it names. */
import { AppError } from "../../core/errors";
import { CONTENT_MAX_CHARS, MAX_INT, PAGE_SIZE_DEFAULT, SEARCH_TERM_MAX_CHARS } from "./model";

const CHANNEL_ID = /^[^\p{Cc}/]{1,128}$/u;
const USER_ID = /^\P{Cc}{1,256}$/u;

export interface Page {
  size?: number;
  offset?: number;
}

export function positiveInt(field: string, value: unknown): number {
  const number = typeof value === "string" && /^\d+$/.test(value) ? Number(value) : value;
  if (typeof number !== "number" || !Number.isInteger(number) || number < 1 || number > MAX_INT) {
    throw new AppError("validation_failed", `${field}: must be a whole number from 1 to ${MAX_INT}`);
  }
  return number;
}

export function checkChannelId(channelId: string): void {
  if (!CHANNEL_ID.test(channelId)) {
    throw new AppError("validation_failed", "channel_id: 1 to 128 characters, without slashes or control characters");
  }
}

export function checkUserId(userId: string): void {
  if (!USER_ID.test(userId))
    throw new AppError("validation_failed", "user_id: 1 to 256 characters, without control characters");
}

export function checkContent(value: unknown): string {
  if (typeof value !== "string" || value.trim() === "")
    throw new AppError("validation_failed", "content: must be a non-empty string");
  if (value.includes("\u0000")) throw new AppError("validation_failed", "content: NUL characters are not allowed");
  if (value.length > CONTENT_MAX_CHARS)
    throw new AppError("validation_failed", `content: at most ${CONTENT_MAX_CHARS} characters`);
  return value;
}

/** Makes a LIKE pattern that matches `term` literally anywhere: `%`, `_` and `\` lose their meaning. */
export function containsPattern(term: string): string {
  return `%${term.replace(/[\\%_]/g, (char) => `\\${char}`)}%`;
}

export function checkSearchTerm(term: string): string {
  if (term.trim() === "") throw new AppError("validation_failed", "search_term: must not be empty");
  if (term.includes("\u0000")) throw new AppError("validation_failed", "search_term: NUL characters are not allowed");
  if (term.length > SEARCH_TERM_MAX_CHARS)
    throw new AppError("validation_failed", `search_term: at most ${SEARCH_TERM_MAX_CHARS} characters`);
  return term;
}

export function pageOf(page: Page): { size: number; offset: number } {
  return { size: page.size ?? PAGE_SIZE_DEFAULT, offset: page.offset ?? 0 };
}
