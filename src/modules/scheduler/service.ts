/**
 * Reservations (spec 4.3) and the conferences Prosody's mod_reservations opens against
 * them (Jicofo's reservation contract: form-encoded POST /conference answered 200, 409
 * with conflict_id, 403 or 419; GET and DELETE /conference/{id}).
 *
 * Reservation times are kept exactly as given and, beside them, as the instants they
 * mean in their time zone; everything that compares times uses the instants.
 */
import { and, asc, desc, eq, gt, isNull, lt, lte, sql } from "drizzle-orm";
import { config } from "../../config";
import { numericId } from "../../core/record-id";
import { roomKey } from "../../core/room-key";
import { db } from "../../db/client";
import { AppError, type ErrorCode } from "../../core/errors";
import { recordEvent } from "../webhooks/outbox";
import { conferences, reservations } from "./schema";

export const DEFAULT_TIMEZONE = "America/New_York";
/** The longest reservation: one year, in minutes. */
export const MAX_DURATION_MINUTES = 525_600;

// ---------------------------------------------------------------- records

export interface ReservationRecord {
  id: number;
  /** As the client gave it. */
  name: string;
  /** The room as Jitsi names it (see core/room-key). */
  room_key: string;
  mail_owner: string;
  start_time: string;
  duration: number;
  timezone: string;
  pin?: string;
}

/** Jicofo's conference object; `duration` is in seconds there, unlike a reservation's minutes. */
export interface ConferenceRecord {
  id: number;
  name: string;
  mail_owner: string;
  start_time: string;
  duration: number;
  timezone: "UTC";
  reservation_id: number | null;
  ended_at: string | null;
}

type ReservationRow = typeof reservations.$inferSelect;
type ConferenceRow = typeof conferences.$inferSelect;

function reservationRecord(row: ReservationRow): ReservationRecord {
  return {
    id: row.id,
    name: row.name,
    room_key: row.roomKey,
    mail_owner: row.mailOwner,
    start_time: row.startTime,
    duration: row.duration,
    timezone: row.timezone,
    ...(row.pin ? { pin: row.pin } : {}),
  };
}

function conferenceRecord(row: ConferenceRow, now = new Date()): ConferenceRecord {
  // A room Prosody never reported destroyed still ends when its time is up.
  const endedAt = row.endedAt ?? (row.endsAt <= now ? row.endsAt : null);
  return {
    id: row.id,
    name: row.name,
    mail_owner: row.mailOwner,
    start_time: row.startTime,
    duration: row.durationSeconds,
    timezone: "UTC",
    reservation_id: row.reservationId,
    ended_at: endedAt ? endedAt.toISOString() : null,
  };
}

// ---------------------------------------------------------------- validation

function invalid(field: string, message: string): AppError {
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
function validRoomName(name: string): string {
  const trimmed = name.trim();
  if (trimmed === "" || [...name].length > 255 || UNPRINTABLE.test(name)) {
    throw invalid("name", "a room name is 1 to 255 printable characters");
  }
  const key = roomKey(trimmed);
  if (key.length > MAX_KEY_LENGTH) throw invalid("name", `the room name is too long once percent-encoded (${key.length} of ${MAX_KEY_LENGTH} characters)`);
  return key;
}

const EMAIL = /^[^\s@"(),:;<>[\\\]]+@[^\s@"(),:;<>[\\\]]+\.[^\s@"(),:;<>[\\\]]+$/;

function validEmail(mailOwner: string): string {
  const value = mailOwner.trim();
  if (value.length > 320 || !EMAIL.test(value)) throw invalid("mail_owner", `"${mailOwner}" is not an e-mail address`);
  return value;
}

function validDuration(duration: number | string): number {
  const value = typeof duration === "number" ? duration : /^\s*\d+(\.\d+)?\s*$/.test(duration) ? Number(duration) : Number.NaN;
  if (!Number.isFinite(value) || value <= 0 || value > MAX_DURATION_MINUTES || Math.round(value * 60) < 1) {
    throw invalid("duration", `a positive number of minutes up to ${MAX_DURATION_MINUTES}, got ${JSON.stringify(duration)}`);
  }
  return value;
}

function validPin(pin: string | undefined): string | undefined {
  if (pin === undefined || pin === "") return undefined;
  if (!/^[A-Za-z0-9]{1,32}$/.test(pin)) throw invalid("pin", "a PIN is 1 to 32 letters or digits");
  return pin;
}

const formatters = new Map<string, Intl.DateTimeFormat>();

/** A formatter for the zone, or undefined when the zone is not an IANA name the runtime knows. */
function zoneFormatter(zone: string): Intl.DateTimeFormat | undefined {
  let formatter = formatters.get(zone);
  if (!formatter) {
    try {
      formatter = new Intl.DateTimeFormat("en-US", {
        timeZone: zone,
        hourCycle: "h23",
        year: "numeric",
        month: "2-digit",
        day: "2-digit",
        hour: "2-digit",
        minute: "2-digit",
        second: "2-digit",
      });
    } catch {
      return undefined;
    }
    formatters.set(zone, formatter);
  }
  return formatter;
}

/** The zone's offset from UTC at an instant, in milliseconds. */
function zoneOffset(formatter: Intl.DateTimeFormat, instant: number): number {
  const parts = Object.fromEntries(formatter.formatToParts(instant).map((part) => [part.type, part.value]));
  const wall = Date.UTC(Number(parts.year), Number(parts.month) - 1, Number(parts.day), Number(parts.hour), Number(parts.minute), Number(parts.second));
  return wall - Math.floor(instant / 1000) * 1000;
}

const DAY_MS = 86_400_000;

/**
 * Wall-clock fields read in a zone, as an instant. Zones change offset at most once a day,
 * so the offsets a day before and a day after are the only candidates. A time that happens
 * twice (clocks go back) is its first occurrence; one that never happens (clocks go
 * forward) is read with the earlier offset, which moves it on by the time skipped.
 */
function zonedInstant(fields: number[], formatter: Intl.DateTimeFormat): number {
  const [year, month, day, hour, minute, second, millis] = fields as [number, number, number, number, number, number, number];
  const wall = Date.UTC(year, month - 1, day, hour, minute, second, millis);
  const before = wall - zoneOffset(formatter, wall - DAY_MS);
  const after = wall - zoneOffset(formatter, wall + DAY_MS);
  const fitting = [before, after].filter((instant) => instant + zoneOffset(formatter, instant) === wall);
  return fitting.length > 0 ? Math.min(...fitting) : before;
}

const LOCAL_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,3}))?)?(Z|[+-]\d{2}:?\d{2})?$/;

/** Date and time fields of an ISO 8601 text, checked against the calendar; the offset in minutes when one is given. */
function parseIsoFields(text: string): { fields: number[]; offsetMinutes?: number } | undefined {
  const match = LOCAL_TIME.exec(text.trim());
  if (!match) return undefined;
  const fields = [1, 2, 3, 4, 5, 6].map((i) => Number(match[i] ?? 0));
  fields.push(Number((match[7] ?? "0").padEnd(3, "0")));
  const [year, month, day, hour, minute, second] = fields as [number, number, number, number, number, number];
  const check = new Date(Date.UTC(year, month - 1, day, hour, minute, second));
  if (
    check.getUTCFullYear() !== year ||
    check.getUTCMonth() !== month - 1 ||
    check.getUTCDate() !== day ||
    check.getUTCHours() !== hour ||
    check.getUTCMinutes() !== minute ||
    check.getUTCSeconds() !== second
  ) {
    return undefined;
  }
  const zone = match[8];
  if (zone === undefined) return { fields };
  if (zone === "Z") return { fields, offsetMinutes: 0 };
  const digits = zone.replace(":", "");
  const sign = digits.startsWith("-") ? -1 : 1;
  const hours = Number(digits.slice(1, 3));
  const minutes = Number(digits.slice(3, 5));
  if (hours > 23 || minutes > 59) return undefined;
  return { fields, offsetMinutes: sign * (hours * 60 + minutes) };
}

function fieldsAtOffset(fields: number[], offsetMinutes: number): number {
  const [year, month, day, hour, minute, second, millis] = fields as [number, number, number, number, number, number, number];
  return Date.UTC(year, month - 1, day, hour, minute, second, millis) - offsetMinutes * 60_000;
}

/** The instant a reservation's start_time means in its time zone. */
function reservationStart(startTime: string, timezone: string | undefined): { startsAt: Date; timezone: string } {
  const givenZone = timezone?.trim() || DEFAULT_TIMEZONE;
  // The spec spells the default "America/New York"; IANA names use `_` for spaces.
  const formatter = zoneFormatter(givenZone.replace(/ /g, "_"));
  if (!formatter) throw invalid("timezone", `"${timezone}" is not an IANA time zone name such as America/New_York`);
  const parsed = parseIsoFields(startTime);
  if (!parsed) throw invalid("start_time", `a date and time YYYY-MM-DDTHH:MM (seconds allowed), got "${startTime}"`);
  const instant = parsed.offsetMinutes === undefined ? zonedInstant(parsed.fields, formatter) : fieldsAtOffset(parsed.fields, parsed.offsetMinutes);
  return { startsAt: new Date(instant), timezone: timezone === undefined || timezone.trim() === "" ? DEFAULT_TIMEZONE : timezone };
}

/** Jicofo's date form, `yyyy-MM-dd'T'HH:mm:ss.SSS` in UTC with a `Z`, which Prosody's datetime.parse reads. */
function jicofoDate(instant: Date): string {
  return `${instant.toISOString().slice(0, 23)}Z`;
}

/**
 * A record id as Prosody sends it back: `1`, or `1.0` from mod_reservations variants that
 * decode JSON with cjson on Lua 5.3+ (every number is a float there); the module's own
 * contract is "any sensible string".
 */
function parseRecordId(id: string, what: string): number {
  const value = numericId(id) ?? Number.NaN;
  // Out of the id column's range is as unknown as any other id.
  if (!(value >= 1 && value <= 2_147_483_647)) throw new AppError("not_found", `no ${what} ${id}`, { message: `no ${what} ${id}` });
  return value;
}

/** Serialises every change to one room name of one account, for the transaction's life. */
async function lockRoom(tx: Pick<typeof db, "execute">, accountId: string, name: string): Promise<void> {
  // drizzle has no builder for advisory locks.
  await tx.execute(sql`select pg_advisory_xact_lock(hashtextextended(${`${accountId}/${name}`}, 0))`);
}

// ---------------------------------------------------------------- reservations

export interface ReservationInput {
  mail_owner: string;
  name: string;
  duration: number | string;
  start_time: string;
  timezone?: string;
  pin?: string;
}

export async function createReservation(accountId: string, input: ReservationInput): Promise<ReservationRecord> {
  const mailOwner = validEmail(input.mail_owner);
  const key = validRoomName(input.name);
  const duration = validDuration(input.duration);
  const { startsAt, timezone } = reservationStart(input.start_time, input.timezone);
  const pin = validPin(input.pin);
  const endsAt = new Date(startsAt.getTime() + Math.round(duration * 60) * 1000);
  return db.transaction(async (tx) => {
    await lockRoom(tx, accountId, key);
    // Two half-open windows [start, end) overlap when each starts before the other ends.
    const [overlap] = await tx
      .select({ id: reservations.id })
      .from(reservations)
      .where(
        and(
          eq(reservations.accountId, accountId),
          eq(reservations.roomKey, key),
          lt(reservations.startsAt, endsAt),
          gt(reservations.endsAt, startsAt),
        ),
      )
      .orderBy(asc(reservations.startsAt))
      .limit(1);
    if (overlap) {
      throw new AppError("conflict", `room ${key} is already reserved at an overlapping time (reservation ${overlap.id})`, { conflict_id: overlap.id });
    }
    const [row] = await tx
      .insert(reservations)
      .values({ accountId, name: input.name, roomKey: key, mailOwner, startTime: input.start_time, timezone, duration, pin, startsAt, endsAt })
      .returning();
    await recordEvent(tx, accountId, "reservation.created", { reservation_id: row!.id, room: key, mail_owner: mailOwner, start_time: input.start_time, duration, timezone });
    return reservationRecord(row!);
  });
}

export async function listReservations(accountId: string): Promise<ReservationRecord[]> {
  const rows = await db.select().from(reservations).where(eq(reservations.accountId, accountId)).orderBy(asc(reservations.startsAt), asc(reservations.id));
  return rows.map(reservationRecord);
}

export async function getReservation(accountId: string, id: string): Promise<ReservationRecord> {
  const [row] = await db
    .select()
    .from(reservations)
    .where(and(eq(reservations.accountId, accountId), eq(reservations.id, parseRecordId(id, "reservation"))));
  if (!row) throw new AppError("not_found", `no reservation ${id}`);
  return reservationRecord(row);
}

/** The room's reservation that is running or comes next; when all are over, the last one. */
export async function reservationForRoom(accountId: string, room: string, now = new Date()): Promise<ReservationRecord> {
  const key = roomKey(room.trim());
  const rows = await db
    .select()
    .from(reservations)
    .where(and(eq(reservations.accountId, accountId), eq(reservations.roomKey, key)))
    .orderBy(asc(reservations.startsAt));
  const row = rows.find((candidate) => candidate.endsAt > now) ?? rows.at(-1);
  if (!row) throw new AppError("not_found", `no reservation for room ${key}`);
  return reservationRecord(row);
}

export async function deleteReservation(accountId: string, id: string): Promise<ReservationRecord> {
  const row = await db.transaction(async (tx) => {
    const [deleted] = await tx
      .delete(reservations)
      .where(and(eq(reservations.accountId, accountId), eq(reservations.id, parseRecordId(id, "reservation"))))
      .returning();
    if (deleted) await recordEvent(tx, accountId, "reservation.deleted", { reservation_id: deleted.id, room: deleted.roomKey });
    return deleted;
  });
  if (!row) throw new AppError("not_found", `no reservation ${id}`);
  return reservationRecord(row);
}

// ---------------------------------------------------------------- conferences (Prosody)

function conferenceStarted(row: ConferenceRow) {
  return { conference_id: row.id, room: row.roomKey, mail_owner: row.mailOwner, start_time: row.startTime, duration: row.durationSeconds, reservation_id: row.reservationId };
}

/** A refusal Prosody can show: it reads the reason from a top-level `message`. */
function refusal(code: ErrorCode, message: string, extra: Record<string, unknown> = {}): AppError {
  return new AppError(code, message, { ...extra, message });
}

/** A JID node: what Prosody sends as the room name (no spaces nor the characters XMPP forbids there). */
const JID_NODE = /^[^\s"&'/:<>@]{1,1023}$/;

/**
 * Who the opener may be as a reservation's owner. mod_reservations sends only the bare JID
 * of the user (never the token's user context), so that JID, and the e-mail address a JID
 * node carries XEP-0106-escaped (`alice\40example.com@meet.example.com`, how Prosody
 * names accounts whose user names are e-mail addresses).
 */
function ownerAddresses(bareJid: string): string[] {
  const jid = bareJid.toLowerCase();
  const at = jid.lastIndexOf("@");
  const node = at > 0 ? jid.slice(0, at) : "";
  const unescaped = node.replace(/\\(20|22|26|27|2f|3a|3c|3e|40|5c)/g, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));
  return unescaped.includes("@") ? [jid, unescaped] : [jid];
}

export interface ConferenceRequest {
  name?: string;
  start_time?: string;
  mail_owner?: string;
}

/**
 * Prosody asks whether a room may start (the first join). The time Prosody sends is the
 * clock every decision uses, so an answer depends only on the request and the stored records.
 */
export async function openConference(accountId: string, request: ConferenceRequest): Promise<ConferenceRecord> {
  const node = request.name?.trim() ?? "";
  if (!JID_NODE.test(node)) throw refusal("validation_failed", "name: the room name (the node of the room's JID) is required", { field: "name" });
  const owner = request.mail_owner?.trim() ?? "";
  if (owner === "" || owner.length > 3071 || /\s/.test(owner)) throw refusal("validation_failed", "mail_owner: the bare JID of the user is required", { field: "mail_owner" });
  const parsed = request.start_time === undefined ? undefined : parseIsoFields(request.start_time);
  if (!parsed || parsed.offsetMinutes === undefined) {
    throw refusal("validation_failed", "start_time: a UTC date and time like 2030-01-15T15:00:00.000Z is required", { field: "start_time" });
  }
  const at = new Date(fieldsAtOffset(parsed.fields, parsed.offsetMinutes));
  // The module compares the answer's name, lower-cased, with the node; rooms are matched on the key.
  const key = roomKey(node);

  return db.transaction(async (tx) => {
    await lockRoom(tx, accountId, key);
    const expired = await tx
      .update(conferences)
      .set({ endedAt: conferences.endsAt })
      .where(and(eq(conferences.accountId, accountId), eq(conferences.roomKey, key), isNull(conferences.endedAt), lte(conferences.endsAt, at)))
      .returning();
    for (const row of expired) await recordEvent(tx, accountId, "conference.ended", { conference_id: row.id, room: row.roomKey, ended_at: row.endedAt!.toISOString() });
    const [running] = await tx
      .select({ id: conferences.id })
      .from(conferences)
      .where(and(eq(conferences.accountId, accountId), eq(conferences.roomKey, key), isNull(conferences.endedAt)));
    if (running) throw refusal("conflict", `room ${key} is already running as conference ${running.id}`, { conflict_id: running.id });

    const booked = await tx
      .select()
      .from(reservations)
      .where(and(eq(reservations.accountId, accountId), eq(reservations.roomKey, key)))
      .orderBy(asc(reservations.startsAt));
    let values: typeof conferences.$inferInsert;
    if (booked.length === 0) {
      const durationSeconds = config.scheduler.defaultConferenceMinutes * 60;
      values = {
        accountId,
        name: node.toLowerCase(),
        roomKey: key,
        mailOwner: owner,
        startTime: request.start_time!.trim(),
        startsAt: at,
        durationSeconds,
        endsAt: new Date(at.getTime() + durationSeconds * 1000),
      };
    } else {
      const open = booked.find((reservation) => reservation.startsAt <= at && at < reservation.endsAt);
      if (!open) {
        const next = booked.find((reservation) => reservation.startsAt > at);
        if (next) throw refusal("forbidden", `room ${key} is reserved from ${next.startTime} (${next.timezone}); it has not started yet`);
        throw refusal("reservation_expired", `the reservation of room ${key} ended at ${jicofoDate(booked.at(-1)!.endsAt)}`);
      }
      if (config.scheduler.checkOwner && !ownerAddresses(owner).includes(open.mailOwner.toLowerCase())) {
        throw refusal("forbidden", `only the owner of the reservation may start room ${key}`);
      }
      // The conference lives exactly as long as the reservation: Prosody closes the room at start_time + duration.
      values = {
        accountId,
        name: node.toLowerCase(),
        roomKey: key,
        mailOwner: owner,
        startTime: jicofoDate(open.startsAt),
        startsAt: open.startsAt,
        durationSeconds: Math.round((open.endsAt.getTime() - open.startsAt.getTime()) / 1000),
        endsAt: open.endsAt,
        reservationId: open.id,
      };
    }
    const [row] = await tx.insert(conferences).values(values).returning();
    await recordEvent(tx, accountId, "conference.started", conferenceStarted(row!));
    return conferenceRecord(row!, at);
  });
}

export async function getConference(accountId: string, id: string): Promise<ConferenceRecord> {
  const [row] = await db
    .select()
    .from(conferences)
    .where(and(eq(conferences.accountId, accountId), eq(conferences.id, parseRecordId(id, "conference"))));
  if (!row) throw refusal("not_found", `no conference ${id}`);
  return conferenceRecord(row);
}

/** Prosody destroyed the room. Ending an ended conference changes nothing. */
export async function endConference(accountId: string, id: string, now = new Date()): Promise<ConferenceRecord> {
  const conferenceId = parseRecordId(id, "conference");
  const ended = await db.transaction(async (tx) => {
    const [row] = await tx
      .update(conferences)
      .set({ endedAt: sql`least(${conferences.endsAt}, ${now.toISOString()}::timestamptz)` })
      .where(and(eq(conferences.accountId, accountId), eq(conferences.id, conferenceId), isNull(conferences.endedAt)))
      .returning();
    if (row) await recordEvent(tx, accountId, "conference.ended", { conference_id: row.id, room: row.roomKey, ended_at: row.endedAt!.toISOString() });
    return row;
  });
  if (ended) return conferenceRecord(ended, now);
  return getConference(accountId, id);
}

export async function listConferences(accountId: string): Promise<ConferenceRecord[]> {
  const rows = await db.select().from(conferences).where(eq(conferences.accountId, accountId)).orderBy(asc(conferences.startsAt), asc(conferences.id));
  const now = new Date();
  return rows.map((row) => conferenceRecord(row, now));
}

/** The room's open conference, or else its latest one. */
export async function conferenceForRoom(accountId: string, room: string): Promise<ConferenceRecord> {
  const key = roomKey(room.trim());
  const [row] = await db
    .select()
    .from(conferences)
    .where(and(eq(conferences.accountId, accountId), eq(conferences.roomKey, key)))
    .orderBy(sql`${conferences.endedAt} is null desc`, desc(conferences.startsAt), desc(conferences.id))
    .limit(1);
  if (!row) throw new AppError("not_found", `no conference for room ${key}`);
  return conferenceRecord(row);
}
