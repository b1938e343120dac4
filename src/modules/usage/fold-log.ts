/**
 * The fold's reads of the conference log (src/modules/conference-log): which rooms it holds, every
 * event of some rooms, every stream and call event about some subjects. Refolding and
 * rebuilding streams and calls read through here; the log is written by the events feature alone.
 */
import { and, asc, eq, inArray, sql } from "drizzle-orm";
import { type Database, db } from "../../db/client";
import { rowsOf } from "../../db/rows";
import { conferenceEvents, MEDIA_EVENT_KINDS, type StoredEvent } from "../conference-log";

/** What the fold needs of an event it folds: the payloads it reads are read in SQL, or again with the media events. */
export type FoldableEvent = Omit<StoredEvent, "payload">;

export const foldableColumns = {
  id: conferenceEvents.id,
  accountId: conferenceEvents.accountId,
  kind: conferenceEvents.kind,
  room: conferenceEvents.room,
  occurredAt: conferenceEvents.occurredAt,
  subject: conferenceEvents.subject,
};
const storedColumns = { ...foldableColumns, payload: conferenceEvents.payload };

/** Events read by raw SQL (ids as the driver gives bigints, instants as text on some drivers). */
export function foldableRows(rows: unknown): FoldableEvent[] {
  type Row = Omit<FoldableEvent, "id" | "occurredAt"> & { id: string | number; occurredAt: string | Date };
  return rowsOf<Row>(rows).map((row) => ({ ...row, id: Number(row.id), occurredAt: new Date(row.occurredAt) }));
}

/** A room of the log, its first event's id and how many events it holds, for refolding everything. */
export type LoggedRoom = { accountId: string; room: string; first: number; events: number };

/**
 * Up to `limit` rooms of the log (of one account, or of all) whose first event comes after the
 * given room's, in the order of their first events, with their event counts (one pass over the
 * log). The log is stored in arrival order, so rooms that lived at the same time hold their events
 * in the same stretch of it: a page of such rooms reads a few thousand of the log's pages, and
 * the next page mostly the same ones, where rooms in name order took each event from a page of its own.
 */
export async function roomsAfter(after: LoggedRoom | null, limit: number, accountId?: string): Promise<LoggedRoom[]> {
  const first = sql<number>`min(${conferenceEvents.id})`;
  const rows = await db
    .select({
      accountId: conferenceEvents.accountId,
      room: conferenceEvents.room,
      first: sql<number>`${first}::bigint`.mapWith(Number),
      events: sql<number>`count(*)::int`,
    })
    .from(conferenceEvents)
    .where(accountId === undefined ? undefined : eq(conferenceEvents.accountId, accountId))
    .groupBy(conferenceEvents.accountId, conferenceEvents.room)
    .having(after ? sql`${first} > ${after.first}` : undefined)
    .orderBy(first)
    .limit(limit);
  return rows;
}

/** Rooms as the JSON a statement reads with `jsonb_to_recordset(…) as k("accountId" text, room text)`. */
export const roomsJson = (rooms: Array<{ accountId: string; room: string }>) =>
  JSON.stringify(rooms.map(({ accountId, room }) => ({ accountId, room })));

/** Every event of the given rooms (breakouts included, they carry their main room's name), in id order. */
export async function eventsOfRooms(rooms: Array<{ accountId: string; room: string }>): Promise<FoldableEvent[]> {
  if (rooms.length === 0) return [];
  const wanted = roomsJson(rooms);
  // One index scan per room: `offset 0` keeps the planner from flattening the lateral join into
  // a hash join over the whole log, which it prefers when one account holds every event.
  const rows = await db.execute(sql`
    select e.id, e.account_id as "accountId", e.kind, e.room, e.occurred_at as "occurredAt", e.subject
    from jsonb_to_recordset(${wanted}::jsonb) as k("accountId" text, room text)
    cross join lateral (
      select c.id, c.account_id, c.kind, c.room, c.occurred_at, c.subject from conference_events c
      where c.account_id = k."accountId" and c.room = k.room offset 0
    ) as e
    order by e.id`);
  return foldableRows(rows);
}

/** A stream's or call's subject, of its account. */
export type MediaSubject = { accountId: string; subject: string };

/** Every stream and call event about the given subjects, oldest first, read through the fold's transaction. */
export async function mediaEventsForSubjects(subjects: MediaSubject[], executor: Database): Promise<StoredEvent[]> {
  if (subjects.length === 0) return [];
  // A join against a JSON list of pairs: drizzle has no tuple IN, and thousands of ORs would plan slowly.
  const wanted = sql`select s."accountId", s.subject from jsonb_to_recordset(${JSON.stringify(subjects)}::jsonb) as s("accountId" text, subject text)`;
  const rows = await executor
    .select(storedColumns)
    .from(conferenceEvents)
    .where(
      and(
        sql`(${conferenceEvents.accountId}, ${conferenceEvents.subject}) in (${wanted})`,
        inArray(conferenceEvents.kind, MEDIA_EVENT_KINDS),
      ),
    )
    .orderBy(asc(conferenceEvents.occurredAt), asc(conferenceEvents.id));
  return rows;
}
