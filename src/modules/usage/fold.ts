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
 * left on it (a fold job lost with Redis), straight from the database.
 */
import { sql } from "drizzle-orm";
import { db } from "../../db/client";
import { log } from "../../core/log";
import {
  claimUnfoldedEvents,
  claimUnfoldedRoomEvents,
  eventsAfter,
  type FoldableEvent,
  markFolded,
  mediaEventsForSubjects,
  roomOfEvent,
  type StoredEvent,
  unfoldedEventsByIds,
} from "../events/service";
import { type EventKind, MEDIA_EVENT_KINDS } from "../events/schema";
import { recordEvents, rowsOf } from "../webhooks/outbox";
import { mediaSessions } from "./schema";

type Tx = Parameters<Parameters<typeof db.transaction>[0]>[0];

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

/** Unix seconds at a JSON path of a payload, as a whole-second timestamp; null unless a number ≥ 0. */
const unixAt = (path: string) =>
  `(case when jsonb_typeof(${path}) = 'number' then case when (${path})::text::numeric >= 0 then to_timestamp(floor((${path})::text::numeric)) end end)`;

/**
 * Upserts, in one statement straight from the log, the room lives and stays the page's
 * conference events name, and answers the spans they touched, whether a stay may now be
 * closed at its room's end, and the events that name no stay or life. Within the page, the
 * halves of a pair are merged first (latest end, first name known), so each key is written
 * once. The `previous` CTE reads the stays before the insert: a reported leave may be earlier
 * than the estimate it replaces, and the days between must be rebuilt too.
 */
async function upsertConferenceFacts(tx: Tx, ids: number[]) {
  const rows = rowsOf<{ what: "span" | "close" | "unusable"; account_id: string; room: string; from_day: string; to_day: string; id: string }>(
    await tx.execute(sql`
      with page as (
        select id, account_id, room, kind, payload,
          case when payload->'is_breakout' = 'true'::jsonb then coalesce(payload->>'breakout_room_id', '') else '' end as breakout_id,
          case when kind in ('room_created', 'room_destroyed') then ${sql.raw(unixAt("payload->'created_at'"))} end as created_at,
          case when kind = 'room_destroyed' then ${sql.raw(unixAt("payload->'destroyed_at'"))} end as destroyed_at
        from conference_events
        where id = any(${`{${ids.join(",")}}`}::bigint[]) and kind in ('room_created', 'room_destroyed', 'occupant_joined', 'occupant_left')
      ),
      -- A destroy names the stays of everyone still listed; a join or a leave names its own.
      occupants as (
        select p.id, o.n, p.account_id, p.room, p.breakout_id, o.occupant
        from page p
        cross join lateral jsonb_array_elements(case jsonb_typeof(p.payload->'all_occupants')
          when 'array' then p.payload->'all_occupants'
          when 'object' then (select coalesce(jsonb_agg(v), '[]'::jsonb) from jsonb_each(p.payload->'all_occupants') as e(k, v))
          else '[]'::jsonb end) with ordinality as o(occupant, n)
        where p.kind = 'room_destroyed' and p.created_at is not null and p.destroyed_at is not null
        union all
        select p.id, 0, p.account_id, p.room, p.breakout_id, p.payload->'occupant'
        from page p where p.kind in ('occupant_joined', 'occupant_left')
      ),
      named as (
        select o.id, o.n, o.account_id, o.room, o.breakout_id, o.occupant->>'occupant_jid' as occupant_jid,
          ${sql.raw(unixAt("o.occupant->'joined_at'"))} as joined_at, ${sql.raw(unixAt("o.occupant->'left_at'"))} as left_at,
          nullif(o.occupant->>'id', '') as user_id, nullif(o.occupant->>'name', '') as name, nullif(o.occupant->>'email', '') as email
        from occupants o
        where jsonb_typeof(o.occupant) = 'object' and jsonb_typeof(o.occupant->'occupant_jid') = 'string'
      ),
      usable as (
        select n.id, n.n, n.account_id, n.room, n.breakout_id, n.occupant_jid, n.joined_at, n.left_at, n.user_id, n.name, n.email
        from named n join page p on p.id = n.id
        where n.joined_at is not null and (p.kind <> 'occupant_left' or n.left_at is not null)
      ),
      incoming as (
        select account_id, room, breakout_id, occupant_jid, joined_at, max(left_at) as left_at,
          (array_agg(user_id order by id, n) filter (where user_id is not null))[1] as user_id,
          (array_agg(name order by id, n) filter (where name is not null))[1] as name,
          (array_agg(email order by id, n) filter (where email is not null))[1] as email
        from usable
        group by account_id, room, breakout_id, occupant_jid, joined_at
      ),
      lives as (
        select account_id, room, breakout_id, created_at as started_at, max(destroyed_at) as ended_at,
          (array_agg(nullif(payload->>'room_jid', '') order by id) filter (where nullif(payload->>'room_jid', '') is not null))[1] as room_jid
        from page
        where created_at is not null and (kind = 'room_created' or destroyed_at is not null)
        group by account_id, room, breakout_id, created_at
      ),
      lives_upserted as (
        insert into room_sessions as r (account_id, room, breakout_id, room_jid, started_at, ended_at)
        select account_id, room, breakout_id, room_jid, started_at, ended_at from lives
        on conflict (account_id, room, breakout_id, started_at) do update set
          -- greatest() skips nulls, so a destroy seen earlier is never undone by a repeated create.
          ended_at = greatest(r.ended_at, excluded.ended_at),
          room_jid = coalesce(r.room_jid, excluded.room_jid),
          updated_at = now()
        returning r.account_id, r.room, r.started_at as joined_at, r.ended_at as left_at
      ),
      previous as (
        select p.account_id, p.room, p.joined_at, p.left_at
        from participant_sessions p
        join incoming k on p.account_id = k.account_id and p.room = k.room and p.breakout_id = k.breakout_id
          and p.occupant_jid = k.occupant_jid and p.joined_at = k.joined_at
        where p.left_at is not null
      ),
      stays_upserted as (
        insert into participant_sessions as p (account_id, room, breakout_id, occupant_jid, user_id, name, email, joined_at, left_at)
        select account_id, room, breakout_id, occupant_jid, user_id, name, email, joined_at, left_at from incoming
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
      ),
      spans as (
        select * from lives_upserted union all select * from previous union all select * from stays_upserted
      )
      select 'span' as what, account_id, room,
        to_char(joined_at at time zone 'UTC', 'YYYY-MM-DD') as from_day,
        to_char(coalesce(left_at, joined_at) at time zone 'UTC', 'YYYY-MM-DD') as to_day, null::text as id
      from spans group by 2, 3, 4, 5
      -- Only an ended room life or a stay with no leave can leave a stay to close at the room's end.
      union all select 'close', null, null, null, null, null
      where exists (select from lives where ended_at is not null) or exists (select from incoming where left_at is null)
      union all select 'unusable', null, null, null, null, id::text from page p
      where not exists (select from usable u where u.id = p.id and u.n = 0)
        and not (p.kind = 'room_created' and p.created_at is not null)
        and not (p.kind = 'room_destroyed' and p.created_at is not null and p.destroyed_at is not null)`),
  );
  const unusable = rows.filter((row) => row.what === "unusable").map((row) => Number(row.id));
  if (unusable.length > 0) {
    // Only event_sync's payload names both halves of a stay; a bare occupant event cannot be paired.
    log.warn({ events: unusable }, "conference events without an event_sync payload are kept in the log but not folded");
  }
  return {
    touched: rows
      .filter((row) => row.what === "span")
      .map((row) => ({ accountId: row.account_id, room: row.room, from: new Date(`${row.from_day}T00:00:00Z`), to: new Date(`${row.to_day}T00:00:00Z`) })),
    mayClose: rows.some((row) => row.what === "close"),
  };
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
  const events = await mediaEventsForSubjects(subjects, tx);
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
async function rebuildDays(tx: Tx, targets: ReturnType<typeof touchedDays>): Promise<SettledDay[]> {
  const changed: SettledDay[] = [];
  for (let i = 0; i < targets.length; i += 5000) {
    const chunk = JSON.stringify(targets.slice(i, i + 5000));
    const written = await tx.execute(sql`
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
      insert into room_usage_daily as d (account_id, room, day, participant_seconds, peak_participants, distinct_participants,
        phone_seconds, streaming_seconds, recording_seconds, peak_viewers, updated_at)
      select account_id, room, day, participant_seconds, peak_participants, distinct_participants,
        phone_seconds, streaming_seconds, recording_seconds, peak_viewers, now()
      from computed where used
      on conflict (account_id, room, day) do update set
        participant_seconds = excluded.participant_seconds, peak_participants = excluded.peak_participants,
        distinct_participants = excluded.distinct_participants, phone_seconds = excluded.phone_seconds,
        streaming_seconds = excluded.streaming_seconds, recording_seconds = excluded.recording_seconds,
        peak_viewers = excluded.peak_viewers, updated_at = now()
      -- A refold that computes the same figures changes nothing, and announces nothing.
      where (d.participant_seconds, d.peak_participants, d.distinct_participants, d.phone_seconds, d.streaming_seconds, d.recording_seconds, d.peak_viewers)
        is distinct from (excluded.participant_seconds, excluded.peak_participants, excluded.distinct_participants, excluded.phone_seconds,
          excluded.streaming_seconds, excluded.recording_seconds, excluded.peak_viewers)
      returning account_id, room, day::text as day, participant_seconds, peak_participants, phone_seconds, streaming_seconds, recording_seconds`);
    changed.push(...rowsOf<SettledDay>(written));
  }
  return changed;
}

interface SettledDay {
  account_id: string;
  room: string;
  day: string;
  participant_seconds: number;
  peak_participants: number;
  phone_seconds: number;
  streaming_seconds: number;
  recording_seconds: number;
}

/**
 * usage.day_settled for every room-day whose settled figures the fold changed, in its
 * transaction, one statement per account. Accounts in a fixed order: each takes its sequence
 * row's lock, and two folds must not take them crosswise.
 */
async function publishSettledDays(tx: Tx, days: SettledDay[]): Promise<void> {
  const byAccount = new Map<string, SettledDay[]>();
  for (const day of days) byAccount.set(day.account_id, [...(byAccount.get(day.account_id) ?? []), day]);
  for (const accountId of [...byAccount.keys()].sort()) {
    await recordEvents(
      tx,
      accountId,
      "usage.day_settled",
      byAccount.get(accountId)!.map(({ account_id: _, ...figures }) => ({
        ...figures,
        participant_seconds: Number(figures.participant_seconds),
        peak_participants: Number(figures.peak_participants),
        phone_seconds: Number(figures.phone_seconds),
        streaming_seconds: Number(figures.streaming_seconds),
        recording_seconds: Number(figures.recording_seconds),
      })),
    );
  }
}

const MEDIA_KINDS = new Set<EventKind>(MEDIA_EVENT_KINDS);

/** Folds a batch of stored events inside the caller's transaction, and marks them folded. */
async function foldInTransaction(tx: Tx, events: FoldableEvent[]): Promise<void> {
  if (events.length === 0) return;
  const subjects = [
    ...new Map(
      events.filter((event) => event.subject !== null && MEDIA_KINDS.has(event.kind)).map((event) => [`${event.accountId}|${event.subject}`, { accountId: event.accountId, subject: event.subject! }]),
    ).values(),
  ];
  const rooms = [...new Map(events.map((event) => [lockKey(event.accountId, event.room), { accountId: event.accountId, room: event.room }])).entries()];
  const ids = events.map((event) => event.id);
  // Before the room locks: the sweep holds event rows while it waits for rooms, never the reverse.
  await markFolded(tx, ids);
  await lockRooms(tx, rooms.map(([key]) => key));
  const touched: Touched[] = events.map((event) => ({ accountId: event.accountId, room: event.room, from: event.occurredAt, to: event.occurredAt }));
  const conference = await upsertConferenceFacts(tx, ids);
  touched.push(...conference.touched);
  if (conference.mayClose) touched.push(...(await closeStaysAtRoomEnd(tx, rooms.map(([, room]) => room))));
  touched.push(...(await rebuildMedia(tx, subjects)));
  await publishSettledDays(tx, await rebuildDays(tx, touchedDays(touched)));
}

/** Folds a batch of stored events (any kinds, any accounts, any order) into the usage tables. */
export async function foldEvents(events: FoldableEvent[]): Promise<void> {
  if (events.length === 0) return;
  await db.transaction((tx) => foldInTransaction(tx, events));
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
 * What a cdr job does: folds every event of the named event's room not folded yet, a page per
 * transaction, until none is left. A burst of a room's events is so folded by one job; an
 * event the sweep holds is left to the sweep. Answers how many events it folded.
 */
export async function foldRoomOf(eventId: number): Promise<number> {
  const where = await roomOfEvent(eventId);
  if (!where) return 0;
  let folded = 0;
  for (;;) {
    const claimed = await db.transaction(async (tx) => {
      const events = await claimUnfoldedRoomEvents(tx, where, ROOM_FOLD_PAGE);
      await foldInTransaction(tx, events);
      return events.length;
    });
    folded += claimed;
    if (claimed < ROOM_FOLD_PAGE) return folded;
  }
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

/**
 * Folds, straight from the database, every event stored at least `olderThanMs` ago that no
 * fold has marked: its job was lost with Redis, failed for good, or never queued. Works in
 * batches of `batchSize`, each claimed and folded in one transaction; a batch that fails is
 * folded one event at a time, so one bad event cannot hold back the rest. Needs no Redis.
 * Answers how many events it folded.
 */
export async function sweepUnfolded(olderThanMs: number, batchSize = 500): Promise<number> {
  let folded = 0;
  for (;;) {
    let claimed = 0;
    try {
      claimed = await db.transaction(async (tx) => {
        const events = await claimUnfoldedEvents(tx, olderThanMs, batchSize);
        await foldInTransaction(tx, events);
        return events.length;
      });
      folded += claimed;
    } catch (error) {
      log.warn({ err: (error as Error).message }, "usage sweep: a batch failed, folding its events one by one");
      const single = await foldOneByOne(olderThanMs, batchSize);
      folded += single.folded;
      if (single.folded === 0) return folded;
      claimed = single.claimed;
    }
    if (claimed < batchSize) return folded;
  }
}

async function foldOneByOne(olderThanMs: number, batchSize: number): Promise<{ claimed: number; folded: number }> {
  const ids = await db.transaction(async (tx) => (await claimUnfoldedEvents(tx, olderThanMs, batchSize)).map((event) => event.id));
  let folded = 0;
  for (const id of ids) {
    try {
      folded += await foldEventIds([id]);
    } catch (error) {
      log.error({ eventId: id, err: (error as Error).message }, "usage sweep: an event cannot be folded; it stays unfolded and is tried again next sweep");
    }
  }
  return { claimed: ids.length, folded };
}
