/**
 * The cursor of a paged list: an event's sequence number or a row's id, a PostgreSQL bigint.
 * Parley's ids count up from 1 and never come near 2^53, so a cursor is bounded by the
 * largest integer a JSON number carries exactly to a JavaScript client: a larger one would be
 * rounded on the way in (`99999999999999999` read as 1e17) and again on the way back. Above it
 * the answer is a 400 naming the field, never a rounded cursor or the database's overflow.
 */
import { t } from "elysia";

type IntegerOptions = NonNullable<Parameters<typeof t.Integer>[0]>;

export function Cursor(options: IntegerOptions = {}) {
  return t.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER, ...options });
}
