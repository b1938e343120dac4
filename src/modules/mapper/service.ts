/**
 * The conference mapper: a stable numeric id per conference address, for phone callers
 * who cannot type a room name, and the dial-in numbers each account publishes.
 *
 * Ids are random (not sequential, so one id says nothing about its neighbours), unique in
 * the deployment, `config.mapper.idDigits` digits long with a leading digit that is never
 * 0, and end in a Damm check digit: every single mistyped digit and every swap of two
 * adjacent digits gives an id whose check fails, so it is refused before any look-up.
 */
import { randomInt } from "node:crypto";
import { and, asc, desc, eq, sql } from "drizzle-orm";
import { config } from "../../core/config";
import { numericId } from "../../core/record-id";
import { roomAddress } from "../../core/room-key";
import { builtOnce, db } from "../../db/client";
import { AppError } from "../../core/errors";
import type { MappingAnswer } from "./model";
import { conferenceMappings, phoneNumbers } from "./schema";

/** Damm's totally anti-symmetric quasigroup of order 10, with zeros on the diagonal (the published table). */
const DAMM = [
  [0, 3, 1, 7, 5, 9, 8, 6, 4, 2],
  [7, 0, 9, 2, 1, 5, 4, 8, 6, 3],
  [4, 2, 0, 6, 8, 7, 1, 3, 5, 9],
  [1, 7, 5, 0, 9, 8, 3, 4, 2, 6],
  [6, 1, 2, 3, 0, 4, 5, 9, 7, 8],
  [3, 6, 7, 4, 2, 0, 9, 5, 8, 1],
  [5, 8, 6, 9, 7, 2, 0, 1, 3, 4],
  [8, 9, 4, 5, 3, 6, 2, 0, 1, 7],
  [9, 4, 3, 8, 6, 1, 7, 2, 0, 5],
  [2, 5, 8, 1, 4, 3, 6, 7, 9, 0],
] as const;

function dammInterim(digits: string): number {
  let interim = 0;
  for (const digit of digits) interim = DAMM[interim]![Number(digit)]!;
  return interim;
}

/** The digit to append to `digits` so the whole passes `hasValidCheckDigit`. */
export function dammCheckDigit(digits: string): number {
  return dammInterim(digits);
}

const MIN_ID_DIGITS = 6;
const MAX_ID_DIGITS = 10;

/** True for a whole number of 6 to 10 digits whose last digit is its Damm check digit. */
export function hasValidCheckDigit(id: number): boolean {
  if (!Number.isSafeInteger(id) || id <= 0) return false;
  const digits = String(id);
  return digits.length >= MIN_ID_DIGITS && digits.length <= MAX_ID_DIGITS && dammInterim(digits) === 0;
}

function randomMapperId(): number {
  const body = [randomInt(1, 10), ...Array.from({ length: config.mapper.idDigits - 2 }, () => randomInt(0, 10))].join(
    "",
  );
  return Number(`${body}${dammCheckDigit(body)}`);
}

/** `room@conference.domain`: a JID node (no spaces or the characters XMPP forbids in it) at a host name. */
const DNS_LABEL = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?";
const CONFERENCE_ADDRESS = new RegExp(`^[^\\s"&'/:<>@]{1,1023}@(?=.{1,253}$)${DNS_LABEL}(?:\\.${DNS_LABEL})+$`);

/** Mapper clients read the reason from a top-level `message`, so it is there beside the error shape. */
function invalidInput(message: string): AppError {
  return new AppError("invalid_mapper_input", message, { message });
}

/** The address as the mapper stores it (the room as its key, core/room-key), or an `invalid_mapper_input` error. */
export function normalizeConference(conference: string): string {
  const { address, host } = roomAddress(conference);
  if (host === undefined || !CONFERENCE_ADDRESS.test(address)) {
    throw invalidInput(`conference must be a room address like room@conference.example.com, got "${conference}"`);
  }
  return address;
}

// The two look-ups of every dial-in, built once rather than by the query builder on each call.
const mappingOfConference = builtOnce("mapperIdFor", () =>
  db
    .select({ id: conferenceMappings.id })
    .from(conferenceMappings)
    .where(
      and(
        eq(conferenceMappings.accountId, sql.placeholder("accountId")),
        eq(conferenceMappings.conference, sql.placeholder("conference")),
      ),
    )
    .prepare("mapper_of_conference"),
);
const conferenceOfId = builtOnce("conferenceForMapperId", () =>
  db
    .select({ accountId: conferenceMappings.accountId, conference: conferenceMappings.conference })
    .from(conferenceMappings)
    .where(eq(conferenceMappings.id, sql.placeholder("id")))
    .prepare("mapper_conference_of_id"),
);

/** Enough to make a collision on every try practically impossible even in a nearly full id space. */
const MAX_ID_ATTEMPTS = 20;

/** The stable id of `room@conference.domain` in the account, made on first request. */
export async function mapperIdFor(accountId: string, conference: string): Promise<number> {
  const address = normalizeConference(conference);
  for (let attempt = 0; attempt < MAX_ID_ATTEMPTS; attempt++) {
    const existing = await mappingOfConference.execute({ accountId, conference: address });
    if (existing[0]) return existing[0].id;
    // Nothing is inserted when either the address (a concurrent request won) or the id
    // (another conference holds it) is taken; the next round tells the two apart.
    await db
      .insert(conferenceMappings)
      .values({ id: randomMapperId(), accountId, conference: address })
      .onConflictDoNothing();
  }
  throw new AppError("internal", "could not find a free conference id; raise MAPPER_ID_DIGITS");
}

/** The conference an id stands for, in whichever account owns it; null when unknown or mistyped. */
export async function conferenceForMapperId(id: number): Promise<{ accountId: string; conference: string } | null> {
  if (!hasValidCheckDigit(id)) return null;
  const [row] = await conferenceOfId.execute({ id });
  return row ?? null;
}

const FOUND = "Successfully retrieved conference mapping";

/**
 * The conferenceMapper operation: `conference` creates or returns the mapping and wins over
 * everything else; otherwise `id` looks one up within the account. Missing or malformed
 * input is `invalid_mapper_input` (405).
 */
export async function resolveMapping(
  accountId: string,
  query: { conference?: string; id?: string },
): Promise<MappingAnswer> {
  const conference = query.conference?.trim();
  if (conference) {
    const address = normalizeConference(conference);
    return { message: FOUND, id: await mapperIdFor(accountId, address), conference: address };
  }
  const rawId = query.id?.trim();
  if (!rawId) throw invalidInput("give conference=room@conference.domain, or id=N to look a mapping up");
  const id = numericId(rawId);
  if (id === undefined) throw invalidInput(`id must be a number of up to 10 digits, got "${query.id}"`);
  if (!hasValidCheckDigit(id))
    return {
      message: "No conference mapping was found: the id's check digit does not match (a mistyped digit?)",
      id,
      conference: false,
    };
  const found = await conferenceForMapperId(id);
  if (!found || found.accountId !== accountId)
    return { message: "No conference mapping was found", id, conference: false };
  return { message: FOUND, id, conference: found.conference };
}

export interface PhoneNumber {
  id: number;
  countryCode: string;
  formattedNumber: string;
  tollFree: boolean;
  /** The number jitsi-meet shows as the one to call (it reads `default`). */
  isDefault: boolean;
}

const numberColumns = {
  id: phoneNumbers.id,
  countryCode: phoneNumbers.countryCode,
  formattedNumber: phoneNumbers.formattedNumber,
  tollFree: phoneNumbers.tollFree,
  isDefault: phoneNumbers.isDefault,
};

const COUNTRY_CODE = /^[A-Z]{2}$/;
/** What people write for a phone number: digits with an optional leading +, spaces, dots, dashes, parentheses. */
const FORMATTED_NUMBER = /^\+?[0-9][0-9 ().-]{2,38}[0-9]$/;

export async function addPhoneNumber(
  accountId: string,
  number: { countryCode: string; formattedNumber: string; tollFree: boolean; isDefault?: boolean },
): Promise<PhoneNumber> {
  const countryCode = number.countryCode.trim().toUpperCase();
  const formattedNumber = number.formattedNumber.trim();
  if (!COUNTRY_CODE.test(countryCode)) {
    throw new AppError(
      "validation_failed",
      `the country code must be two letters (ISO 3166-1 alpha-2, e.g. US), got "${number.countryCode}"`,
    );
  }
  if (!FORMATTED_NUMBER.test(formattedNumber)) {
    throw new AppError(
      "validation_failed",
      `"${number.formattedNumber}" is not a phone number (digits, ` +
        "an optional leading +, spaces, dots, dashes, parentheses)",
    );
  }
  const [row] = await db
    .insert(phoneNumbers)
    .values({ accountId, countryCode, formattedNumber, tollFree: number.tollFree })
    .onConflictDoNothing()
    .returning(numberColumns);
  if (!row) throw new AppError("conflict", `the account already lists ${formattedNumber}`);
  return number.isDefault ? setDefaultPhoneNumber(row.id) : row;
}

/** Makes the number its account's default, the one jitsi-meet offers first; the previous default stops being one. */
export async function setDefaultPhoneNumber(id: number): Promise<PhoneNumber & { accountId: string }> {
  return db.transaction(async (tx) => {
    const [number] = await tx
      .select({ accountId: phoneNumbers.accountId })
      .from(phoneNumbers)
      .where(eq(phoneNumbers.id, id));
    if (!number) throw new AppError("not_found", `no phone number with id ${id}`);
    await tx
      .update(phoneNumbers)
      .set({ isDefault: false })
      .where(and(eq(phoneNumbers.accountId, number.accountId), eq(phoneNumbers.isDefault, true)));
    const [row] = await tx
      .update(phoneNumbers)
      .set({ isDefault: true })
      .where(eq(phoneNumbers.id, id))
      .returning(numberColumns);
    return { ...row!, accountId: number.accountId };
  });
}

/** Default first (jitsi-meet falls back to the first number when none is marked), then by country. */
export async function listPhoneNumbers(accountId: string): Promise<PhoneNumber[]> {
  return db
    .select(numberColumns)
    .from(phoneNumbers)
    .where(eq(phoneNumbers.accountId, accountId))
    .orderBy(desc(phoneNumbers.isDefault), asc(phoneNumbers.countryCode), asc(phoneNumbers.id));
}

/** Removes a number by the id `list-numbers` shows; returns what was removed. */
export async function removePhoneNumber(id: number): Promise<PhoneNumber & { accountId: string }> {
  const [row] = await db
    .delete(phoneNumbers)
    .where(eq(phoneNumbers.id, id))
    .returning({ ...numberColumns, accountId: phoneNumbers.accountId });
  if (!row) throw new AppError("not_found", `no phone number with id ${id}`);
  return row;
}
