/**
 * The fold's queue: the conference events not folded yet (conference_events_unfolded, listed
 * by a trigger as each event is stored), how a fold claims them, and how it marks them folded
 * in its own transaction: the work table of the outbox's "cdr" consumer (core/outbox). A
 * rung room's fold claims that room's, the sweep whole rooms', a report an account's. The ring
 * that gets them folded at once comes from the append (src/modules/conference-log/service.ts).
 */
import { and, asc, eq, inArray, sql } from "drizzle-orm";
import { type Database, db } from "../../db/client";
import { arrayLiteral, rowsOf } from "../../db/rows";
import { conferenceEvents, conferenceEventsUnfolded } from "../conference-log";
import { type FoldableEvent, foldableColumns, foldableRows, type LoggedRoom, roomsJson } from "./fold-log";

/** The named events that are not folded yet. */
export async function unfoldedEventsByIds(ids: number[]): Promise<FoldableEvent[]> {
  if (ids.length === 0) return [];
  const rows = await db
    .select(foldableColumns)
    .from(conferenceEventsUnfolded)
    .innerJoin(conferenceEvents, eq(conferenceEvents.id, conferenceEventsUnfolded.eventId))
    .where(inArray(conferenceEventsUnfolded.eventId, ids));
  return rows;
}

/** Whether any event is listed at all: one index probe, for a sweep to skip its claims on an empty list. */
export async function anyUnfolded(): Promise<boolean> {
  const [listed] = await db
    .select({ eventId: conferenceEventsUnfolded.eventId })
    .from(conferenceEventsUnfolded)
    .limit(1);
  return listed !== undefined;
}

/**
 * One of `of` disjoint shares of the rooms, by a hash of the room: sweeps running side by side
 * each claim from their own share, so they never pick the same rooms and wait on each other.
 */
export interface RoomShare {
  index: number;
  of: number;
}

/**
 * A sweep's page: the rooms named by the oldest events due (stored at least `olderThanMs`
 * ago), and up to `limit` of those rooms' unfolded events, whole rooms first in the order of
 * their oldest event, so a room life's joins and leaves fold together (one write of each
 * stay) instead of in whichever pages their ids fall. The rooms come from the oldest quarter
 * page of due events: all their listed events are read to pick the page, and a backlog's
 * oldest events name hundreds of rooms at once, of which a page takes a few dozen. Younger
 * events of those rooms come along: folding them early changes nothing, and their ring then
 * finds nothing left. Rows another fold holds are skipped, also in the sample, so sweeps
 * running at once (of several cdr processes, or of one) take different rooms; a `share` keeps
 * those of one process to disjoint rooms from the start (its rooms' events, whoever named them).
 * The sampled events are locked to be looked at, and a lock lasts to the transaction's end, so
 * they are all in the page, beside the `limit` picked: one that was left out stayed held, and
 * every fold running meanwhile skipped it, splitting its room.
 */
export async function claimUnfoldedRooms(
  tx: Database,
  olderThanMs: number,
  limit: number,
  share: RoomShare = { index: 0, of: 1 },
): Promise<FoldableEvent[]> {
  // The due rows are looked for among the oldest `walked` listed events, read in the list's
  // key order: asked for the share's oldest due rows over the whole list at once, the planner
  // (which takes the share's filter to keep one row in two hundred) read every listed event,
  // probed the log for each and sorted them, a page's claim growing with the backlog (172 of
  // 182 ms a claim at 100,000 listed, 56 ms in all with the walk). When other folds hold every
  // candidate, the next ones are looked at, and the next window once this one has no more, as
  // the whole list's rows were skipped until some were free.
  const sampled = Math.ceil(limit / 4);
  const walked = sampled * share.of * 8;
  const window = { walked, sampled, olderThanMs, share };
  for (let after = 0; ; ) {
    const events = await claimWindow(tx, { ...window, after, limit });
    if (events.length > 0) return events;
    const next = await nextStart(tx, { ...window, after });
    if (next === undefined) return [];
    after = next;
  }
}

interface Window {
  /** The walk starts after this event id. */
  after: number;
  walked: number;
  sampled: number;
  olderThanMs: number;
  share: RoomShare;
}

/** The oldest `walked` listed events after `after`, and of those the share's due ones, the oldest `sampled * 2`. */
const windowOf = ({ after, walked, sampled, olderThanMs, share }: Window) => sql`
  walk as (
    select u.event_id, u.account_id, u.room from conference_events_unfolded u
    where u.event_id > ${after} order by u.event_id limit ${walked}
  ),
  candidates as (
    select w.event_id from walk w
    cross join lateral (select e.received_at from conference_events e where e.id = w.event_id offset 0) e
    where e.received_at < now() - make_interval(secs => ${olderThanMs / 1000})
      and (hashtext(w.account_id || '|' || w.room) & 2147483647) % ${share.of} = ${share.index}
    order by w.event_id limit ${sampled * 2}
  )`;

/**
 * Where to look next when nothing after `window.after` could be claimed: past its candidates
 * when there were as many as asked (other folds held them all), else past the window when it
 * was whole; undefined when the list ends there.
 */
async function nextStart(tx: Database, window: Window): Promise<number | undefined> {
  const [row] = rowsOf<{
    candidates: number;
    last_candidate: string | null;
    walked: number;
    window_end: string | null;
  }>(
    await tx.execute(sql`
      with ${windowOf(window)}
      select (select count(*)::int from candidates) as candidates, (select max(event_id) from candidates) as last_candidate,
        (select count(*)::int from walk) as walked, (select max(event_id) from walk) as window_end`),
  );
  if (!row) return undefined;
  if (row.candidates === window.sampled * 2) return Number(row.last_candidate);
  return row.walked === window.walked ? Number(row.window_end) : undefined;
}

/** One window's claim (see claimUnfoldedRooms): every lookup an index probe per row. */
async function claimWindow(tx: Database, window: Window & { limit: number }): Promise<FoldableEvent[]> {
  const { sampled, limit } = window;
  // The lateral joins with `offset 0` and `= any(array)` keep each lookup a probe: during a
  // backlog the list's statistics lag far behind it, and the planner's own choice was to scan
  // the whole list and the whole log for every page.
  const rows = await tx.execute(sql`
    with ${windowOf(window)},
    due as (
      select u.event_id, u.account_id, u.room from conference_events_unfolded u
      where u.event_id = any(array(select event_id from candidates))
      order by u.event_id limit ${sampled}
      for update of u skip locked
    ),
    rooms as (select account_id, room, min(event_id) as first from due group by account_id, room),
    picked as (
      select l.event_id from rooms r
      cross join lateral (
        select u.event_id from conference_events_unfolded u where u.account_id = r.account_id and u.room = r.room offset 0
      ) l
      order by r.first, l.event_id limit ${limit}
    ),
    claimed as (
      select u.event_id from conference_events_unfolded u
      where u.event_id = any(array(select event_id from picked union select event_id from due))
      for update skip locked
    )
    select e.id, e.account_id as "accountId", e.kind, e.room, e.occurred_at as "occurredAt", e.subject
    from claimed c
    cross join lateral (select * from conference_events e where e.id = c.event_id offset 0) e
    order by e.id`);
  return foldableRows(rows);
}

/**
 * The oldest events of one room not folded yet, locked for the fold's transaction; rows a
 * sweep holds are skipped (the sweep folds them).
 */
export async function claimUnfoldedRoomEvents(
  tx: Database,
  where: { accountId: string; room: string },
  limit: number,
): Promise<FoldableEvent[]> {
  const rows = await tx
    .select(foldableColumns)
    .from(conferenceEventsUnfolded)
    .innerJoin(conferenceEvents, eq(conferenceEvents.id, conferenceEventsUnfolded.eventId))
    .where(and(eq(conferenceEventsUnfolded.accountId, where.accountId), eq(conferenceEventsUnfolded.room, where.room)))
    .orderBy(asc(conferenceEventsUnfolded.eventId))
    .limit(limit)
    .for("update", { of: conferenceEventsUnfolded, skipLocked: true });
  return rows;
}

/** An account's unfolded events: of the given rooms, or of all its rooms when none are given. */
function unfoldedOf(accountId: string, rooms: string[]) {
  return and(
    eq(conferenceEventsUnfolded.accountId, accountId),
    rooms.length > 0 ? inArray(conferenceEventsUnfolded.room, rooms) : undefined,
  );
}

/**
 * When the oldest of an account's (or its rooms') unfolded events was stored, or null when
 * every one is folded: one probe of the unfolded list's index when nothing is pending. A
 * fold in flight still lists its events until it commits.
 */
export async function oldestUnfoldedAt(accountId: string, rooms: string[]): Promise<Date | null> {
  // First whether any is listed: a probe that stops at the first index entry, whatever the
  // planner believes of the list's size (its statistics lag a backlog and its clearing).
  const [listed] = await db
    .select({ eventId: conferenceEventsUnfolded.eventId })
    .from(conferenceEventsUnfolded)
    .where(unfoldedOf(accountId, rooms))
    .limit(1);
  if (!listed) return null;
  const [row] = await db
    .select({ at: sql<string | Date | null>`min(${conferenceEvents.receivedAt})` })
    .from(conferenceEventsUnfolded)
    .innerJoin(conferenceEvents, eq(conferenceEvents.id, conferenceEventsUnfolded.eventId))
    .where(unfoldedOf(accountId, rooms));
  return row?.at ? new Date(row.at) : null;
}

/**
 * The oldest unfolded events of an account (or of its rooms), locked for the caller's fold.
 * Unlike a rung room's and the sweep's claims this one waits for the rows a fold in flight holds:
 * once that fold commits they are gone, so what it answers and what that fold folded are
 * every event stored before the call.
 */
export async function claimUnfoldedOf(
  tx: Database,
  accountId: string,
  rooms: string[],
  limit: number,
): Promise<FoldableEvent[]> {
  const rows = await tx
    .select(foldableColumns)
    .from(conferenceEventsUnfolded)
    .innerJoin(conferenceEvents, eq(conferenceEvents.id, conferenceEventsUnfolded.eventId))
    .where(unfoldedOf(accountId, rooms))
    .orderBy(asc(conferenceEventsUnfolded.eventId))
    .limit(limit)
    .for("update", { of: conferenceEventsUnfolded });
  return rows;
}

/**
 * Marks events folded, inside the fold's transaction so the mark commits with the fold: takes
 * them off the unfolded list. The fold does this first: taking the rows' locks before the
 * rooms' keeps the order the sweep uses, so a rung fold and a sweep never wait on each other crosswise.
 */
export async function markFolded(tx: Database, ids: number[]): Promise<void> {
  if (ids.length === 0) return;
  await tx.execute(sql`delete from conference_events_unfolded where event_id = any(${arrayLiteral(ids)}::bigint[])`);
}

/**
 * Takes every listed event of whole rooms off the list, before the fold reads them: an event
 * listed by then is seen by every later statement of the fold, and one stored after stays
 * listed and folds again, which changes nothing. One scan of the list's room index per room.
 */
export async function markRoomsFolded(tx: Database, rooms: LoggedRoom[]): Promise<void> {
  const wanted = roomsJson(rooms);
  // The listed rows found by a probe of the room index per room (as a join, once autovacuum's analyze
  // had counted a backlog, the planner hashed the rooms and scanned the whole list per page), then
  // deleted where they lie: the list's rows are never updated, so a row's ctid names it until it is
  // deleted, and going there is half the cost of looking each id up again in the primary key.
  await tx.execute(sql`
    delete from conference_events_unfolded where ctid = any(array(
      select l.ctid from jsonb_to_recordset(${wanted}::jsonb) as k("accountId" text, room text)
      cross join lateral (
        select u.ctid from conference_events_unfolded u where u.account_id = k."accountId" and u.room = k.room offset 0
      ) l))`);
}
