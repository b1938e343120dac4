/**
 * Folds conference events into sessions and per-room-per-day usage. Every step is an
 * upsert keyed by what the event itself names, or a rebuild from the log, so folding an
 * event twice changes nothing and events may arrive in any order:
 *  - room lives and participant stays are upserted (both halves of a pair carry the key);
 *  - a stay with no leave inside a room life that has ended is closed at the room's end
 *    and marked estimated, until a real leave arrives and replaces it;
 *  - streams, recordings and calls are rebuilt from every event about their subject;
 *  - each UTC day a touched session overlaps is recomputed from the session tables.
 * Folds of the same room are serialised by a transaction-scoped advisory lock.
 */
import { sql } from "drizzle-orm";
import { db } from "../../db/client";
import { log } from "../../http/log";
import {
  breakoutOf,
  type EventSyncBody,
  type EventSyncOccupant,
  eventsAfter,
  eventsByIds,
  MEDIA_EVENT_KINDS,
  mediaEventsForSubjects,
  type StoredEvent,
} from "../events/service";
import { mediaSessions, type participantSessions, roomSessions } from "./schema";

type Tx = Parameters<Parameters<typeof db.transaction>[0]>[0];

interface RoomLife {
  accountId: string;
  room: string;
  breakoutId: string;
  roomJid: string | null;
  startedAt: Date;
  endedAt: Date | null;
}

type Stay = Pick<
  typeof participantSessions.$inferSelect,
  "accountId" | "room" | "breakoutId" | "occupantJid" | "userId" | "name" | "email" | "joinedAt" | "leftAt"
>;

interface MediaInterval {
  accountId: string;
  room: string;
  kind: "streaming" | "recording" | "phone";
  subject: string;
  startedAt: Date;
  endedAt: Date | null;
  peakViewers: number;
  details: Record<string, unknown>;
}

/** A span of time that changed in a room; every UTC day it overlaps is recomputed. */
interface Touched {
  accountId: string;
  room: string;
  from: Date;
  to: Date;
}

/** Rows of a raw query: postgres.js answers an array, PGlite an object with `rows`. */
function rowsOf<T>(result: unknown): T[] {
  return Array.isArray(result) ? (result as T[]) : ((result as { rows: T[] }).rows ?? []);
}

const isUnixTime = (value: unknown): value is number => typeof value === "number" && Number.isFinite(value) && value >= 0;
const isOccupant = (value: unknown): value is EventSyncOccupant =>
  typeof value === "object" && value !== null && typeof (value as EventSyncOccupant).occupant_jid === "string" && isUnixTime((value as EventSyncOccupant).joined_at);
const seconds = (unix: number) => new Date(Math.floor(unix) * 1000);
const later = (a: Date | null, b: Date | null) => (a === null ? b : b === null ? a : a > b ? a : b);
const textOrNull = (value: unknown) => (value === undefined || value === null || value === "" ? null : String(value));

function occupantsOf(payload: EventSyncBody): EventSyncOccupant[] {
  const all = payload.all_occupants;
  return Array.isArray(all) ? all : Object.values(all ?? {});
}

/** Merges the room lives and stays named in a batch, so each key is written once. */
function collectConferenceFacts(events: StoredEvent[]) {
  const lives = new Map<string, RoomLife>();
  const stays = new Map<string, Stay>();
  const addLife = (life: RoomLife) => {
    const key = `${life.accountId}|${life.room}|${life.breakoutId}|${life.startedAt.getTime()}`;
    const known = lives.get(key);
    if (!known) lives.set(key, life);
    else {
      known.endedAt = later(known.endedAt, life.endedAt);
      known.roomJid ??= life.roomJid;
    }
  };
  const addStay = (stay: Stay) => {
    const key = `${stay.accountId}|${stay.room}|${stay.breakoutId}|${stay.occupantJid}|${stay.joinedAt.getTime()}`;
    const known = stays.get(key);
    if (!known) stays.set(key, stay);
    else {
      known.leftAt = later(known.leftAt, stay.leftAt);
      known.userId ??= stay.userId;
      known.name ??= stay.name;
      known.email ??= stay.email;
    }
  };
  const stayOf = (event: StoredEvent, breakoutId: string, occupant: EventSyncOccupant): Stay => ({
    accountId: event.accountId,
    room: event.room,
    breakoutId,
    occupantJid: occupant.occupant_jid,
    userId: textOrNull(occupant.id),
    name: textOrNull(occupant.name),
    email: textOrNull(occupant.email),
    joinedAt: seconds(occupant.joined_at),
    leftAt: occupant.left_at === undefined ? null : seconds(occupant.left_at),
  });

  const unusable: number[] = [];
  for (const event of events) {
    const payload = event.payload as EventSyncBody;
    const breakoutId = breakoutOf(payload);
    switch (event.kind) {
      case "room_created":
      case "room_destroyed": {
        const ended = event.kind === "room_destroyed";
        if (!isUnixTime(payload.created_at) || (ended && !isUnixTime(payload.destroyed_at))) {
          unusable.push(event.id);
          break;
        }
        addLife({
          accountId: event.accountId,
          room: event.room,
          breakoutId,
          roomJid: textOrNull(payload.room_jid),
          startedAt: seconds(payload.created_at),
          endedAt: ended ? seconds(payload.destroyed_at!) : null,
        });
        for (const occupant of ended ? occupantsOf(payload).filter(isOccupant) : []) addStay(stayOf(event, breakoutId, occupant));
        break;
      }
      case "occupant_joined":
      case "occupant_left":
        if (isOccupant(payload.occupant) && (event.kind === "occupant_joined" || isUnixTime(payload.occupant.left_at))) {
          addStay(stayOf(event, breakoutId, payload.occupant));
        } else unusable.push(event.id);
        break;
      default:
        break;
    }
  }
  if (unusable.length > 0) {
    // Only event_sync's payload names both halves of a stay; a bare occupant event cannot be paired.
    log.warn({ events: unusable }, "conference events without an event_sync payload are kept in the log but not folded");
  }
  return { lives: [...lives.values()], stays: [...stays.values()] };
}

/**
 * Pairs the starts and stops of one subject in time order. A stream's recording runs from
 * recording_started, or stream_started with `recording: true`, to recording_stopped or the
 * stream's stop. A call counts from call_started (sent when answered) to call_ended; a call
 * that ended unanswered is kept with no duration, so the report can list it.
 */
function pairMediaEvents(events: StoredEvent[]): MediaInterval[] {
  const intervals: MediaInterval[] = [];
  const open = new Map<MediaInterval["kind"], MediaInterval>();
  const start = (event: StoredEvent, kind: MediaInterval["kind"], details: Record<string, unknown> = {}) => {
    if (open.has(kind)) return;
    const interval: MediaInterval = {
      accountId: event.accountId,
      room: event.room,
      kind,
      subject: event.subject!,
      startedAt: event.occurredAt,
      endedAt: null,
      peakViewers: 0,
      details,
    };
    open.set(kind, interval);
    intervals.push(interval);
  };
  const stop = (event: StoredEvent, kind: MediaInterval["kind"]) => {
    const interval = open.get(kind);
    if (!interval) return undefined;
    interval.endedAt = event.occurredAt;
    open.delete(kind);
    return interval;
  };
  const callDetails = (payload: Record<string, unknown>) => ({
    caller: payload.caller ?? null,
    callee: payload.callee ?? null,
    answered: payload.answered === true,
    reason: payload.reason ?? null,
  });

  for (const event of events) {
    switch (event.kind) {
      case "stream_started":
        start(event, "streaming");
        if (event.payload.recording === true) start(event, "recording");
        break;
      case "stream_stopped": {
        const stream = stop(event, "streaming");
        // The streaming feature also sends the peak it counted itself.
        const peak = Number(event.payload.peak_viewers);
        if (stream && Number.isFinite(peak)) stream.peakViewers = Math.max(stream.peakViewers, Math.round(peak));
        stop(event, "recording");
        break;
      }
      case "recording_started":
        start(event, "recording");
        break;
      case "recording_stopped":
        stop(event, "recording");
        break;
      case "viewers_changed": {
        const viewers = Number(event.payload.viewers);
        const stream = open.get("streaming") ?? intervals.findLast((interval) => interval.kind === "streaming");
        if (stream && Number.isFinite(viewers)) stream.peakViewers = Math.max(stream.peakViewers, Math.round(viewers));
        break;
      }
      case "call_started":
        start(event, "phone", callDetails({ ...event.payload, answered: true }));
        break;
      case "call_ended": {
        const call = stop(event, "phone");
        if (call) call.details = { ...call.details, ...callDetails({ ...event.payload, answered: true }) };
        else {
          start(event, "phone", callDetails(event.payload));
          stop(event, "phone");
        }
        break;
      }
      default:
        break;
    }
  }
  // Two intervals starting in the same second share a key; the later one is what the log says last.
  return [...new Map(intervals.map((interval) => [`${interval.kind}|${interval.startedAt.getTime()}`, interval])).values()];
}

function lockKey(accountId: string, room: string) {
  return `${accountId}|${room}`;
}

async function lockRooms(tx: Tx, keys: string[]): Promise<void> {
  const sorted = [...new Set(keys)].sort();
  // One statement takes the locks in a fixed order, so two folds never wait on each other crosswise.
  await tx.execute(sql`select pg_advisory_xact_lock(hashtextextended(key, 0)) from jsonb_array_elements_text(${JSON.stringify(sorted)}::jsonb) with ordinality as k(key, n) order by n`);
}

async function upsertRoomLives(tx: Tx, lives: RoomLife[]): Promise<Touched[]> {
  if (lives.length === 0) return [];
  const rows = await tx
    .insert(roomSessions)
    .values(lives)
    .onConflictDoUpdate({
      target: [roomSessions.accountId, roomSessions.room, roomSessions.breakoutId, roomSessions.startedAt],
      set: {
        // greatest() skips nulls, so a destroy seen earlier is never undone by a repeated create.
        endedAt: sql`greatest(${roomSessions.endedAt}, excluded.ended_at)`,
        roomJid: sql`coalesce(${roomSessions.roomJid}, excluded.room_jid)`,
        updatedAt: sql`now()`,
      },
    })
    .returning({ accountId: roomSessions.accountId, room: roomSessions.room, from: roomSessions.startedAt, to: roomSessions.endedAt });
  return rows.map((row) => ({ ...row, to: row.to ?? row.from }));
}

/**
 * Upserts the stays and answers the spans they had before and have after: a reported leave
 * may be earlier than the estimate it replaces, and the days between must be rebuilt too.
 * Raw SQL because one statement does both (the `previous` CTE reads the snapshot before
 * the insert) and takes the batch as one JSON parameter, several times faster than
 * thousands of bound values.
 */
async function upsertStays(tx: Tx, stays: Stay[]): Promise<Touched[]> {
  if (stays.length === 0) return [];
  const rows = rowsOf<{ account_id: string; room: string; joined_at: string; left_at: string | null }>(
    await tx.execute(sql`
      with incoming as (
        select * from jsonb_to_recordset(${JSON.stringify(stays)}::jsonb) as k("accountId" text, room text, "breakoutId" text,
          "occupantJid" text, "userId" text, name text, email text, "joinedAt" timestamptz, "leftAt" timestamptz)
      ),
      previous as (
        select p.account_id, p.room, p.joined_at, p.left_at
        from participant_sessions p
        join incoming k on p.account_id = k."accountId" and p.room = k.room and p.breakout_id = k."breakoutId"
          and p.occupant_jid = k."occupantJid" and p.joined_at = k."joinedAt"
        where p.left_at is not null
      ),
      upserted as (
        insert into participant_sessions as p (account_id, room, breakout_id, occupant_jid, user_id, name, email, joined_at, left_at)
        select "accountId", room, "breakoutId", "occupantJid", "userId", name, email, "joinedAt", "leftAt" from incoming
        on conflict (account_id, room, breakout_id, occupant_jid, joined_at) do update set
          user_id = coalesce(p.user_id, excluded.user_id),
          name = coalesce(p.name, excluded.name),
          email = coalesce(p.email, excluded.email),
          -- A reported leave replaces an estimated one; an event without a leave keeps what is there.
          left_at = case when excluded.left_at is null then p.left_at
            when p.left_estimated then excluded.left_at
            else greatest(p.left_at, excluded.left_at) end,
          left_estimated = p.left_estimated and excluded.left_at is null,
          updated_at = now()
        returning p.account_id, p.room, p.joined_at, p.left_at
      )
      select * from previous union all select * from upserted`),
  );
  return rows.map((row) => ({ accountId: row.account_id, room: row.room, from: new Date(row.joined_at), to: new Date(row.left_at ?? row.joined_at) }));
}

/** Closes, at the room's end, every stay of the given rooms that has no leave inside an ended room life. */
async function closeStaysAtRoomEnd(tx: Tx, rooms: Array<{ accountId: string; room: string }>): Promise<Touched[]> {
  const rows = rowsOf<{ account_id: string; room: string; joined_at: string; left_at: string }>(await tx.execute(sql`
    update participant_sessions p
    set left_at = r.ended_at, left_estimated = true, updated_at = now()
    from room_sessions r, jsonb_to_recordset(${JSON.stringify(rooms)}::jsonb) as k("accountId" text, room text)
    where p.account_id = k."accountId" and p.room = k.room
      and r.account_id = p.account_id and r.room = p.room and r.breakout_id = p.breakout_id
      and p.left_at is null and r.ended_at is not null
      and p.joined_at >= r.started_at and p.joined_at <= r.ended_at
    returning p.account_id, p.room, p.joined_at, p.left_at`));
  return rows.map((row) => ({ accountId: row.account_id, room: row.room, from: new Date(row.joined_at), to: new Date(row.left_at) }));
}

async function rebuildMedia(tx: Tx, subjects: Array<{ accountId: string; subject: string }>): Promise<Touched[]> {
  if (subjects.length === 0) return [];
  const events = await mediaEventsForSubjects(subjects);
  const bySubject = new Map<string, StoredEvent[]>();
  for (const event of events) {
    const key = `${event.accountId}|${event.subject}`;
    bySubject.set(key, [...(bySubject.get(key) ?? []), event]);
  }
  const intervals = [...bySubject.values()].flatMap(pairMediaEvents);
  const removed = rowsOf<{ account_id: string; room: string; started_at: string; ended_at: string | null }>(await tx.execute(sql`
    delete from media_sessions m
    using jsonb_to_recordset(${JSON.stringify(subjects)}::jsonb) as s("accountId" text, subject text)
    where m.account_id = s."accountId" and m.subject = s.subject
    returning m.account_id, m.room, m.started_at, m.ended_at`));
  if (intervals.length > 0) await tx.insert(mediaSessions).values(intervals);
  return [
    ...removed.map((row) => ({ accountId: row.account_id, room: row.room, from: new Date(row.started_at), to: new Date(row.ended_at ?? row.started_at) })),
    ...intervals.map((interval) => ({ accountId: interval.accountId, room: interval.room, from: interval.startedAt, to: interval.endedAt ?? interval.startedAt })),
  ];
}

const DAY_MS = 86_400_000;
/** A session reported as lasting longer than this only has its first and last days recomputed each fold. */
const MAX_DAYS_PER_SPAN = 62;

function touchedDays(spans: Touched[]) {
  const targets = new Map<string, { account_id: string; room: string; day: string }>();
  const add = (accountId: string, room: string, dayMs: number) => {
    const day = new Date(dayMs).toISOString().slice(0, 10);
    targets.set(`${accountId}|${room}|${day}`, { account_id: accountId, room, day });
  };
  for (const span of spans) {
    const first = Math.floor(span.from.getTime() / DAY_MS) * DAY_MS;
    const last = Math.floor(Math.max(span.to.getTime(), span.from.getTime()) / DAY_MS) * DAY_MS;
    if ((last - first) / DAY_MS > MAX_DAYS_PER_SPAN) {
      add(span.accountId, span.room, first);
      add(span.accountId, span.room, last);
      continue;
    }
    for (let day = first; day <= last; day += DAY_MS) add(span.accountId, span.room, day);
  }
  return [...targets.values()];
}

/**
 * Rebuilds the daily rows of the given (account, room, day) targets from the session tables.
 * Days hold settled usage: a stay, stream or call counts once it has ended (an estimated end
 * included), so a row never depends on when the fold ran.
 */
async function rebuildDays(tx: Tx, targets: ReturnType<typeof touchedDays>): Promise<void> {
  for (let i = 0; i < targets.length; i += 5000) {
    const chunk = JSON.stringify(targets.slice(i, i + 5000));
    await tx.execute(sql`
      with targets as (
        select t.account_id, t.room, t.day,
          t.day::timestamp at time zone 'UTC' as d0, (t.day + 1)::timestamp at time zone 'UTC' as d1
        from jsonb_to_recordset(${chunk}::jsonb) as t(account_id text, room text, day date)
      ),
      stays as (
        select t.account_id, t.room, t.day, coalesce(p.user_id, p.email, p.occupant_jid) as who,
          greatest(p.joined_at, t.d0) as s, greatest(least(p.left_at, t.d1), p.joined_at, t.d0) as e
        from targets t
        join participant_sessions p on p.account_id = t.account_id and p.room = t.room
          and p.left_at is not null and p.joined_at < t.d1 and p.left_at >= t.d0
      ),
      people as (
        select account_id, room, day, sum(extract(epoch from e - s)) as seconds, count(distinct who) as distinct_people
        from stays group by account_id, room, day
      ),
      running as (
        -- At one instant leaves count before joins, so a hand-over is not an overlap.
        select account_id, room, day, sum(delta) over (partition by account_id, room, day order by at, delta rows unbounded preceding) as present
        from (select account_id, room, day, s as at, 1 as delta from stays union all select account_id, room, day, e, -1 from stays) as points
      ),
      peaks as (select account_id, room, day, max(present) as peak from running group by account_id, room, day),
      media as (
        select t.account_id, t.room, t.day,
          sum(extract(epoch from greatest(least(m.ended_at, t.d1), m.started_at, t.d0) - greatest(m.started_at, t.d0))) filter (where m.kind = 'phone') as phone,
          sum(extract(epoch from greatest(least(m.ended_at, t.d1), m.started_at, t.d0) - greatest(m.started_at, t.d0))) filter (where m.kind = 'streaming') as streaming,
          sum(extract(epoch from greatest(least(m.ended_at, t.d1), m.started_at, t.d0) - greatest(m.started_at, t.d0))) filter (where m.kind = 'recording') as recording,
          max(m.peak_viewers) filter (where m.kind = 'streaming') as viewers
        from targets t
        join media_sessions m on m.account_id = t.account_id and m.room = t.room
          and m.ended_at is not null and m.started_at < t.d1 and m.ended_at >= t.d0
        group by t.account_id, t.room, t.day
      ),
      computed as (
        select t.account_id, t.room, t.day, round(coalesce(pe.seconds, 0)) as participant_seconds, coalesce(pk.peak, 0) as peak_participants,
          coalesce(pe.distinct_people, 0) as distinct_participants, round(coalesce(me.phone, 0)) as phone_seconds,
          round(coalesce(me.streaming, 0)) as streaming_seconds, round(coalesce(me.recording, 0)) as recording_seconds,
          coalesce(me.viewers, 0) as peak_viewers,
          pe.room is not null or me.room is not null as used
        from targets t
        left join people pe using (account_id, room, day)
        left join peaks pk using (account_id, room, day)
        left join media me using (account_id, room, day)
      ),
      -- A day left with no stay and no media (its only session moved or was rebuilt) keeps no row.
      emptied as (
        delete from room_usage_daily d using computed c
        where not c.used and d.account_id = c.account_id and d.room = c.room and d.day = c.day
      )
      insert into room_usage_daily (account_id, room, day, participant_seconds, peak_participants, distinct_participants,
        phone_seconds, streaming_seconds, recording_seconds, peak_viewers, updated_at)
      select account_id, room, day, participant_seconds, peak_participants, distinct_participants,
        phone_seconds, streaming_seconds, recording_seconds, peak_viewers, now()
      from computed where used
      on conflict (account_id, room, day) do update set
        participant_seconds = excluded.participant_seconds, peak_participants = excluded.peak_participants,
        distinct_participants = excluded.distinct_participants, phone_seconds = excluded.phone_seconds,
        streaming_seconds = excluded.streaming_seconds, recording_seconds = excluded.recording_seconds,
        peak_viewers = excluded.peak_viewers, updated_at = now()`);
  }
}

/** Folds a batch of stored events (any kinds, any accounts, any order) into the usage tables. */
export async function foldEvents(events: StoredEvent[]): Promise<void> {
  if (events.length === 0) return;
  const { lives, stays } = collectConferenceFacts(events);
  const subjects = [
    ...new Map(
      events.filter((event) => event.subject !== null && MEDIA_EVENT_KINDS.includes(event.kind)).map((event) => [`${event.accountId}|${event.subject}`, { accountId: event.accountId, subject: event.subject! }]),
    ).values(),
  ];
  const rooms = [...new Map(events.map((event) => [lockKey(event.accountId, event.room), { accountId: event.accountId, room: event.room }])).entries()];
  await db.transaction(async (tx) => {
    await lockRooms(tx, rooms.map(([key]) => key));
    const touched: Touched[] = events.map((event) => ({ accountId: event.accountId, room: event.room, from: event.occurredAt, to: event.occurredAt }));
    touched.push(...(await upsertRoomLives(tx, lives)));
    touched.push(...(await upsertStays(tx, stays)));
    // Only an ended room life or a stay with no leave can leave a stay to close at the room's end.
    if (lives.some((life) => life.endedAt !== null) || stays.some((stay) => stay.leftAt === null)) {
      touched.push(...(await closeStaysAtRoomEnd(tx, rooms.map(([, room]) => room))));
    }
    touched.push(...(await rebuildMedia(tx, subjects)));
    await rebuildDays(tx, touchedDays(touched));
  });
}

/** What a cdr job does: folds the named events (a missing one, e.g. of a deleted account, is skipped). */
export async function foldEventIds(ids: number[]): Promise<number> {
  const events = await eventsByIds(ids);
  await foldEvents(events);
  return events.length;
}

/** Folds the whole log again, page by page; safe at any time, since folding is idempotent. */
export async function refoldLog(pageSize = 10_000): Promise<number> {
  let folded = 0;
  let after = 0;
  for (;;) {
    const page = await eventsAfter(after, pageSize);
    if (page.length === 0) return folded;
    await foldEvents(page);
    folded += page.length;
    after = page.at(-1)!.id;
  }
}
