/** What the reads of messages and users share: a page's bounds, and a search term as a literal pattern. */
import { PAGE_SIZE_DEFAULT } from "./model";

export interface Page {
  size?: number;
  offset?: number;
}

/** Makes a LIKE pattern that matches `term` literally anywhere: `%`, `_` and `\` lose their meaning. */
export function containsPattern(term: string): string {
  return `%${term.replace(/[\\%_]/g, (char) => `\\${char}`)}%`;
}

export function pageOf(page: Page): { size: number; offset: number } {
  return { size: page.size ?? PAGE_SIZE_DEFAULT, offset: page.offset ?? 0 };
}
