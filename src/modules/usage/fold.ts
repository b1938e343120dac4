/**
 * Folds conference events into sessions and per-room-per-day usage. Every step is an
 * upsert keyed by what the event itself names, or a rebuild from the log, so folding an
 * event twice changes nothing and events may arrive in any order:
 *  - room lives and participant stays are upserted (both halves of a pair carry the key);
 *  - a stay with no leave inside a room life that has ended is closed at the room's end
 *    and marked estimated, until a real leave arrives and replaces it;
 *  - streams, recordings and calls are rebuilt from every event about their subject;
 *  - each UTC day a touched session overlaps is recomputed from the session tables.
 * Folds of the same room are serialised by a transaction-scoped advisory lock. The fold
 * takes its events off the unfolded list in its own transaction; the sweep folds whatever is
 * left on it (a ring lost with Redis), straight from the database.
 */
import { sql } from "drizzle-orm";
import { type Database, db } from "../../db/client";
import { log } from "../../core/log";
import { eventsOfRooms, type FoldableEvent, type LoggedRoom, type MediaSubject, roomsAfter } from "./fold-log";
import {
  anyUnfolded,
  claimUnfoldedOf,
  claimUnfoldedRoomEvents,
  claimUnfoldedRooms,
  markFolded,
  markRoomsFolded,
  oldestUnfoldedAt,
  type RoomShare,
  unfoldedEventsByIds,
} from "./fold-queue";
import { type EventKind, MEDIA_EVENT_KINDS } from "../conference-log";
import { publishSettledDays, rebuildDays, type Touched, touchedDays } from "./fold-days";
import { rebuildMedia } from "./fold-media";
import { closeStaysAtRoomEnd, type FoldPage, upsertConferenceFacts } from "./fold-stays";
import { announceEndedRooms } from "./room-ended";

function lockKey(accountId: string, room: string) {
  return `${accountId}|${room}`;
}

async function lockRooms(tx: Database, rooms: Array<{ accountId: string; room: string }>): Promise<void> {
  const sorted = [...new Set(rooms.map(({ accountId, room }) => lockKey(accountId, room)))].sort();
  // One statement takes the locks in a fixed order, so two folds never wait on each other crosswise.
  await tx.execute(
    sql`select pg_advisory_xact_lock(hashtextextended(key, 0)) from jsonb_array_elements_text(${JSON.stringify(sorted)}::jsonb) with ordinality as k(key, n) order by n`,
  );
}

const MEDIA_KINDS = new Set<EventKind>(MEDIA_EVENT_KINDS);

/**
 * A fold's transaction, with JIT compilation off. The planner cannot see how many occupants
 * an event lists and guesses a hundred, so a page's statements are costed at hundreds of
 * thousands of rows, past jit_above_cost: compiling them took some 0.3 s a page (EXPLAIN
 * ANALYZE inside the fold), longer than running them.
 */
function foldTransaction<T>(run: (tx: Database) => Promise<T>): Promise<T> {
  return db.transaction(async (tx) => {
    await tx.execute(sql`set local jit = off`);
    return run(tx);
  });
}

/** Folds a batch of stored events inside the caller's transaction, and marks them folded. */
async function foldInTransaction(tx: Database, events: FoldableEvent[]): Promise<void> {
  if (events.length === 0) return;
  const subjects = [
    ...new Map(
      events
        .filter((event) => event.subject !== null && MEDIA_KINDS.has(event.kind))
        .map((event) => [
          `${event.accountId}|${event.subject}`,
          { accountId: event.accountId, subject: event.subject! },
        ]),
    ).values(),
  ];
  const rooms = [...new Map(events.map((event) => [lockKey(event.accountId, event.room), event])).values()].map(
    ({ accountId, room }) => ({ accountId, room }),
  );
  const ids = events.map((event) => event.id);
  // Before the room locks: the sweep holds event rows while it waits for rooms, never the reverse.
  await markFolded(tx, ids);
  await lockRooms(tx, rooms);
  const touched: Touched[] = events.map((event) => ({
    accountId: event.accountId,
    room: event.room,
    from: event.occurredAt,
    to: event.occurredAt,
  }));
  await foldFacts(tx, { ids, accounts: events.map((event) => event.accountId) }, subjects, touched);
}

/**
 * Folds every event of some whole rooms (a refold's page) inside the caller's transaction, and
 * takes them off the unfolded list; the events are read in the database alone.
 */
async function foldRoomsInTransaction(tx: Database, rooms: LoggedRoom[]): Promise<void> {
  await markRoomsFolded(tx, rooms);
  await lockRooms(tx, rooms);
  await foldFacts(tx, { rooms }, [], []);
}

/**
 * The fold from the page statement on: sessions upserted, stays closed, media re-paired, rooms
 * ended, days rebuilt. The subjects and spans are those the caller read off the page's events.
 */
async function foldFacts(tx: Database, page: FoldPage, subjects: MediaSubject[], touched: Touched[]): Promise<void> {
  const conference = await upsertConferenceFacts(tx, page);
  touched.push(...conference.touched);
  if (conference.closable.length > 0) touched.push(...(await closeStaysAtRoomEnd(tx, conference.closable)));
  touched.push(...(await rebuildMedia(tx, [...subjects, ...conference.subjects])));
  // Once the lives' stays are closed and their media rebuilt: room.ended carries the report's figures.
  await announceEndedRooms(tx, conference.ended);
  await publishSettledDays(tx, await rebuildDays(tx, touchedDays(touched)));
}

/** Folds a batch of stored events (any kinds, any accounts, any order) into the usage tables. */
export async function foldEvents(events: FoldableEvent[]): Promise<void> {
  if (events.length === 0) return;
  await foldTransaction((tx) => foldInTransaction(tx, events));
}

/** Folds the named events still unfolded (one the sweep folded, or of a deleted account, is skipped). */
export async function foldEventIds(ids: number[]): Promise<number> {
  const events = await unfoldedEventsByIds(ids);
  await foldEvents(events);
  return events.length;
}

/** How many of a room's events one transaction of a room fold takes. */
const ROOM_FOLD_PAGE = 5_000;

/**
 * What the cdr worker does for a rung room: folds every event of the room not folded yet, a
 * page per transaction, until none is left. A burst of a room's events is so folded by one
 * pass; an event another fold holds is left to it. Answers how many events it folded.
 */
export async function foldRoom(where: { accountId: string; room: string }): Promise<number> {
  let folded = 0;
  for (;;) {
    const claimed = await foldTransaction(async (tx) => {
      const events = await claimUnfoldedRoomEvents(tx, where, ROOM_FOLD_PAGE);
      await foldInTransaction(tx, events);
      return events.length;
    });
    folded += claimed;
    if (claimed < ROOM_FOLD_PAGE) return folded;
  }
}

/** How many pending events a report folds before it is read; a bigger backlog is left to the cdr worker. */
const REPORT_FOLD_LIMIT = ROOM_FOLD_PAGE;

/**
 * A report's read-after-write step: folds the account's (or the given rooms') events not
 * folded yet, up to REPORT_FOLD_LIMIT, waiting for a fold in flight to commit, and answers
 * the instant the report is complete to: `askedAt`, or when the oldest event still left
 * unfolded was stored. When nothing is pending it is one index probe.
 */
export async function foldBeforeReport(accountId: string, rooms: string[], askedAt: Date): Promise<Date> {
  if ((await oldestUnfoldedAt(accountId, rooms)) === null) return askedAt;
  try {
    await foldTransaction(async (tx) =>
      foldInTransaction(tx, await claimUnfoldedOf(tx, accountId, rooms, REPORT_FOLD_LIMIT)),
    );
  } catch (error) {
    // An event no fold can take (the sweep logs it and leaves it
    // listed) holds as_of back; the report is still answered.
    log.warn(
      { accountId, err: (error as Error).message },
      "usage report: its pending events could not be folded; it is complete only to the oldest of them",
    );
  }
  const oldest = await oldestUnfoldedAt(accountId, rooms);
  return oldest !== null && oldest < askedAt ? oldest : askedAt;
}

/** How many rooms one listing of the log names by default. */
const ROOMS_PER_LISTING = 50_000;

/** About how many events a refold's page holds, unless told otherwise. */
export const REFOLD_PAGE = 10_000;

/** How a refold pages the log, and whose events it folds. */
export interface RefoldOptions {
  /** About how many events a page holds. */
  pageSize?: number;
  /** Pages folded at once. */
  concurrency?: number;
  /** Only this account's events; every account's when absent. */
  accountId?: string;
  /** How many rooms one listing of the log names; each listing reads the whole log once. */
  roomsPerListing?: number;
}

/**
 * Folds the whole log again; safe at any time, since folding is idempotent. A page is every
 * event of a run of whole rooms (about `pageSize` events), so a room life's joins and leaves
 * fold together and each stay is written once, already closed. A room bigger than a page is
 * folded alone, in slices of `pageSize`. Pages hold different rooms, so `concurrency` of them
 * fold at once, each in its own transaction: PostgreSQL runs them side by side on its cores.
 */
export async function refoldLog({
  pageSize = REFOLD_PAGE,
  concurrency = 2,
  accountId,
  roomsPerListing = ROOMS_PER_LISTING,
}: RefoldOptions = {}): Promise<number> {
  let folded = 0;
  let after: LoggedRoom | null = null;
  for (;;) {
    const rooms = await roomsAfter(after, roomsPerListing, accountId);
    if (rooms.length === 0) return folded;
    const pages = roomPages(rooms, pageSize).values();
    const folder = async () => {
      for (const page of pages) {
        // A room bigger than a page is folded alone, in slices of its events.
        if (page.length === 1 && page[0]!.events > pageSize) {
          const events = await eventsOfRooms(page);
          for (let start = 0; start < events.length; start += pageSize)
            await foldEvents(events.slice(start, start + pageSize));
          folded += events.length;
          continue;
        }
        await foldTransaction((tx) => foldRoomsInTransaction(tx, page));
        folded += page.reduce((sum, room) => sum + room.events, 0);
      }
    };
    await Promise.all(Array.from({ length: concurrency }, folder));
    // A short listing was the log's last: another would read the whole log again to find nothing.
    if (rooms.length < roomsPerListing) return folded;
    after = rooms.at(-1)!;
  }
}

/** Runs of consecutive rooms holding at most `pageSize` events together (or one room alone). */
function roomPages(rooms: LoggedRoom[], pageSize: number): LoggedRoom[][] {
  const pages: LoggedRoom[][] = [];
  let page: LoggedRoom[] = [];
  let size = 0;
  for (const room of rooms) {
    if (page.length > 0 && size + room.events > pageSize) {
      pages.push(page);
      page = [];
      size = 0;
    }
    page.push(room);
    size += room.events;
  }
  if (page.length > 0) pages.push(page);
  return pages;
}

/** Sweep pages folded at once, each in its own transaction: PostgreSQL runs them side by side on its cores. */
const SWEEP_CONCURRENCY = 2;

/**
 * Folds, straight from the database, every event stored at least `olderThanMs` ago that no
 * fold has taken: its ring was lost with Redis, or its fold failed. Works in
 * pages of whole rooms (`claimUnfoldedRooms`, about `pageSize` events), each claimed and folded
 * in one transaction, `concurrency` pages at once, each from its own share of the rooms (claiming
 * from the same oldest events, they took the same rooms and waited on each other's locks). Once
 * a page fails the sweep goes on alone, folding a page's events one at a time, so one bad event
 * cannot hold back the rest. Needs no Redis. Answers how many events it folded.
 */
export async function sweepUnfolded(
  olderThanMs: number,
  pageSize = ROOM_FOLD_PAGE,
  concurrency = SWEEP_CONCURRENCY,
): Promise<number> {
  // An idle service's sweep, every USAGE_SWEEP_INTERVAL_MS: one probe instead of a transaction and two
  // window reads per sweeper (on the embedded database some 60 ms of CPU a sweep). An event listed
  // after the probe is its ring's, or the next sweep's, as if the sweep had run a moment earlier.
  if (!(await anyUnfolded())) return 0;
  let folded = 0;
  let failing = false;
  const sweeper = async (index: number) => {
    while (!failing) {
      try {
        const claimed = await sweepPage(olderThanMs, pageSize, { index, of: concurrency });
        folded += claimed;
        if (claimed === 0) return;
      } catch (error) {
        // The first sweeper to meet a failing page goes on alone; the others stop after their page.
        if (failing) return;
        failing = true;
        log.warn({ err: (error as Error).message }, "usage sweep: a page failed, folding its events one by one");
        folded += await sweepAfterFailure(olderThanMs, pageSize);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, (_, index) => sweeper(index)));
  return folded;
}

/** Claims a sweep's page and folds it in one transaction; answers how many events it took. */
function sweepPage(olderThanMs: number, pageSize: number, share?: RoomShare): Promise<number> {
  return foldTransaction(async (tx) => {
    const events = await claimUnfoldedRooms(tx, olderThanMs, pageSize, share);
    await foldInTransaction(tx, events);
    return events.length;
  });
}

/** The sweep alone after a page failed: the next page folded one event at a time, then whole pages until one fails. */
async function sweepAfterFailure(olderThanMs: number, pageSize: number): Promise<number> {
  let folded = 0;
  for (;;) {
    const single = await foldOneByOne(olderThanMs, pageSize);
    folded += single.folded;
    if (single.folded === 0 || single.claimed === 0) return folded;
    for (;;) {
      try {
        const claimed = await sweepPage(olderThanMs, pageSize);
        folded += claimed;
        if (claimed === 0) return folded;
      } catch (error) {
        log.warn({ err: (error as Error).message }, "usage sweep: a page failed, folding its events one by one");
        break;
      }
    }
  }
}

/**
 * Claims a page as the sweep does (so the failed page's events,
 * unless another fold took them) and folds each event on its own.
 */
async function foldOneByOne(olderThanMs: number, pageSize: number): Promise<{ claimed: number; folded: number }> {
  const ids = await foldTransaction(async (tx) =>
    (await claimUnfoldedRooms(tx, olderThanMs, pageSize)).map((event) => event.id),
  );
  let folded = 0;
  for (const id of ids) {
    try {
      folded += await foldEventIds([id]);
    } catch (error) {
      log.error(
        { eventId: id, err: (error as Error).message },
        "usage sweep: an event cannot be folded; it stays unfolded and is tried again next sweep",
      );
    }
  }
  return { claimed: ids.length, folded };
}
