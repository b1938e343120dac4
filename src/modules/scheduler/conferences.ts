/**
 * The conferences Prosody's mod_reservations opens against the reservations (Jicofo's
 * reservation contract: form-encoded POST /conference answered 200, 409 with conflict_id,
 * 403 or 419; GET and DELETE /conference/{id}).
 */
import { and, asc, desc, eq, isNull, lte, sql } from "drizzle-orm";
import { config } from "../../core/config";
import { AppError, type ErrorCode } from "../../core/errors";
import { roomKey } from "../../core/room-key";
import { db } from "../../db/client";
import { recordEvent } from "../catalogue";
import type { Conference, ConferenceRequest } from "./model";
import { lockRoom } from "./reservations";
import { conferences, reservations } from "./schema";
import { parseRecordId } from "./validation";
import { fieldsAtOffset, jicofoDate, parseIsoFields } from "./zoned-time";

type ConferenceRow = typeof conferences.$inferSelect;

function conferenceRecord(row: ConferenceRow, now = new Date()): Conference {
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

function conferenceStarted(row: ConferenceRow) {
  return {
    conference_id: row.id,
    room: row.roomKey,
    mail_owner: row.mailOwner,
    start_time: row.startTime,
    duration: row.durationSeconds,
    reservation_id: row.reservationId,
  };
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
  const unescaped = node.replace(/\\(20|22|26|27|2f|3a|3c|3e|40|5c)/g, (_, hex: string) =>
    String.fromCharCode(Number.parseInt(hex, 16)),
  );
  return unescaped.includes("@") ? [jid, unescaped] : [jid];
}

/**
 * Prosody asks whether a room may start (the first join). The time Prosody sends is the
 * clock every decision uses, so an answer depends only on the request and the stored records.
 */
export async function openConference(accountId: string, request: ConferenceRequest): Promise<Conference> {
  const node = request.name?.trim() ?? "";
  if (!JID_NODE.test(node))
    throw refusal("validation_failed", "name: the room name (the node of the room's JID) is required", {
      field: "name",
    });
  const owner = request.mail_owner?.trim() ?? "";
  if (owner === "" || owner.length > 3071 || /\s/.test(owner))
    throw refusal("validation_failed", "mail_owner: the bare JID of the user is required", { field: "mail_owner" });
  const parsed = request.start_time === undefined ? undefined : parseIsoFields(request.start_time);
  if (!parsed || parsed.offsetMinutes === undefined) {
    throw refusal("validation_failed", "start_time: a UTC date and time like 2030-01-15T15:00:00.000Z is required", {
      field: "start_time",
    });
  }
  const at = new Date(fieldsAtOffset(parsed.fields, parsed.offsetMinutes));
  // The module compares the answer's name, lower-cased, with the node; rooms are matched on the key.
  const key = roomKey(node);

  return db.transaction(async (tx) => {
    await lockRoom(tx, accountId, key);
    const expired = await tx
      .update(conferences)
      .set({ endedAt: conferences.endsAt })
      .where(
        and(
          eq(conferences.accountId, accountId),
          eq(conferences.roomKey, key),
          isNull(conferences.endedAt),
          lte(conferences.endsAt, at),
        ),
      )
      .returning();
    for (const row of expired)
      await recordEvent(tx, accountId, "conference.ended", {
        conference_id: row.id,
        room: row.roomKey,
        ended_at: row.endedAt!.toISOString(),
      });
    const [running] = await tx
      .select({ id: conferences.id })
      .from(conferences)
      .where(and(eq(conferences.accountId, accountId), eq(conferences.roomKey, key), isNull(conferences.endedAt)));
    if (running)
      throw refusal("conflict", `room ${key} is already running as conference ${running.id}`, {
        conflict_id: running.id,
      });

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
        if (next)
          throw refusal(
            "forbidden",
            `room ${key} is reserved from ${next.startTime} (${next.timezone}); it has not started yet`,
          );
        throw refusal(
          "reservation_expired",
          `the reservation of room ${key} ended at ${jicofoDate(booked.at(-1)!.endsAt)}`,
        );
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

export async function getConference(accountId: string, id: string): Promise<Conference> {
  const [row] = await db
    .select()
    .from(conferences)
    .where(and(eq(conferences.accountId, accountId), eq(conferences.id, parseRecordId(id, "conference"))));
  if (!row) throw refusal("not_found", `no conference ${id}`);
  return conferenceRecord(row);
}

/** Prosody destroyed the room. Ending an ended conference changes nothing. */
export async function endConference(accountId: string, id: string, now = new Date()): Promise<Conference> {
  const conferenceId = parseRecordId(id, "conference");
  const ended = await db.transaction(async (tx) => {
    const [row] = await tx
      .update(conferences)
      .set({ endedAt: sql`least(${conferences.endsAt}, ${now.toISOString()}::timestamptz)` })
      .where(and(eq(conferences.accountId, accountId), eq(conferences.id, conferenceId), isNull(conferences.endedAt)))
      .returning();
    if (row)
      await recordEvent(tx, accountId, "conference.ended", {
        conference_id: row.id,
        room: row.roomKey,
        ended_at: row.endedAt!.toISOString(),
      });
    return row;
  });
  if (ended) return conferenceRecord(ended, now);
  return getConference(accountId, id);
}

export async function listConferences(accountId: string): Promise<Conference[]> {
  const rows = await db
    .select()
    .from(conferences)
    .where(eq(conferences.accountId, accountId))
    .orderBy(asc(conferences.startsAt), asc(conferences.id));
  const now = new Date();
  return rows.map((row) => conferenceRecord(row, now));
}

/** The room's open conference, or else its latest one. */
export async function conferenceForRoom(accountId: string, room: string): Promise<Conference> {
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
