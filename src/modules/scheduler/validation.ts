/** The checks a reservation's fields and a record id pass, each failing with the field it names. */
import { AppError } from "../../core/errors";
import { numericId } from "../../core/record-id";
import { roomKey } from "../../core/room-key";

/** The longest reservation: one year, in minutes. */
const MAX_DURATION_MINUTES = 525_600;

/** A validation failure that names its field, as every scheduler check reports one. */
export function invalid(field: string, message: string): AppError {
  return new AppError("validation_failed", `${field}: ${message}`, { field });
}

/**
 * Control characters, lone surrogates, private-use and unassigned code points, line and
 * paragraph separators: nothing a user types into a room name. Format characters stay
 * (the zero-width joiners of Persian and Indic words, emoji sequences).
 */
const UNPRINTABLE = /[\p{Cc}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}]/u;
/** A MUC room name is a JID node: at most 1023 bytes, and a key is ASCII. */
const MAX_KEY_LENGTH = 1023;

/** What a user typed as the room, checked; the key of it (surrounding spaces are no part of a room name). */
export function validRoomName(name: string): string {
  const trimmed = name.trim();
  if (trimmed === "" || [...name].length > 255 || UNPRINTABLE.test(name)) {
    throw invalid("name", "a room name is 1 to 255 printable characters");
  }
  const key = roomKey(trimmed);
  if (key.length > MAX_KEY_LENGTH)
    throw invalid(
      "name",
      `the room name is too long once percent-encoded (${key.length} of ${MAX_KEY_LENGTH} characters)`,
    );
  return key;
}

const EMAIL = /^[^\s@"(),:;<>[\\\]]+@[^\s@"(),:;<>[\\\]]+\.[^\s@"(),:;<>[\\\]]+$/;

export function validEmail(mailOwner: string): string {
  const value = mailOwner.trim();
  if (value.length > 320 || !EMAIL.test(value)) throw invalid("mail_owner", `"${mailOwner}" is not an e-mail address`);
  return value;
}

export function validDuration(duration: number | string): number {
  const value =
    typeof duration === "number" ? duration : /^\s*\d+(\.\d+)?\s*$/.test(duration) ? Number(duration) : Number.NaN;
  if (!Number.isFinite(value) || value <= 0 || value > MAX_DURATION_MINUTES || Math.round(value * 60) < 1) {
    throw invalid(
      "duration",
      `a positive number of minutes up to ${MAX_DURATION_MINUTES}, got ${JSON.stringify(duration)}`,
    );
  }
  return value;
}

export function validPin(pin: string | undefined): string | undefined {
  if (pin === undefined || pin === "") return undefined;
  if (!/^[A-Za-z0-9]{1,32}$/.test(pin)) throw invalid("pin", "a PIN is 1 to 32 letters or digits");
  return pin;
}

/**
 * A record id as Prosody sends it back: `1`, or `1.0` from mod_reservations variants that
 * decode JSON with cjson on Lua 5.3+ (every number is a float there); the module itself
 * sends back whatever id the server gave it.
 */
export function parseRecordId(id: string, what: string): number {
  const value = numericId(id) ?? Number.NaN;
  // Out of the id column's range is as unknown as any other id.
  if (!(value >= 1 && value <= 2_147_483_647))
    throw new AppError("not_found", `no ${what} ${id}`, { message: `no ${what} ${id}` });
  return value;
}
