/**
 * Per-room-per-day usage: each UTC day a folded span touches is rebuilt from the session
 * tables, and a day whose settled figures changed is announced as usage.day_settled.
 */
import { sql } from "drizzle-orm";
import type { Database } from "../../db/client";
import { rowsOf } from "../../db/rows";
import { recordEvents } from "../catalogue";

/** A span of time that changed in a room; every UTC day it overlaps is recomputed. */
export interface Touched {
  accountId: string;
  room: string;
  from: Date;
  to: Date;
}

const DAY_MS = 86_400_000;
/** A session reported as lasting longer than this only has its first and last days recomputed each fold. */
const MAX_DAYS_PER_SPAN = 62;

export function touchedDays(spans: Touched[]) {
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
export async function rebuildDays(tx: Database, targets: ReturnType<typeof touchedDays>): Promise<SettledDay[]> {
  const changed: SettledDay[] = [];
  for (let i = 0; i < targets.length; i += 5000) {
    const chunk = JSON.stringify(targets.slice(i, i + 5000));
    const written = await tx.execute(sql`
      -- Each target numbered: the sorts below (distinct people, presence in time order) group by
      -- that number instead of the account, room and day, whose text keys made most of their cost.
      with targets as (
        select t.n, t.account_id, t.room, t.day,
          t.day::timestamp at time zone 'UTC' as d0, (t.day + 1)::timestamp at time zone 'UTC' as d1
        from rows from (jsonb_to_recordset(${chunk}::jsonb) as (account_id text, room text, day date))
          with ordinality as t(account_id, room, day, n)
      ),
      -- Each target's stays and media by a probe of its room's index (\`offset 0\` keeps the subquery
      -- correlated): joined as tables, the planner hashed every stay there is for each fold once
      -- its statistics counted the table (autovacuum's analyze), a fold's cost growing with the table.
      stays as (
        select t.n, p.who, p.s, p.e
        from targets t
        cross join lateral (
          select coalesce(p.user_id, p.email, p.occupant_jid) as who,
            greatest(p.joined_at, t.d0) as s, greatest(least(p.left_at, t.d1), p.joined_at, t.d0) as e
          from participant_sessions p
          where p.account_id = t.account_id and p.room = t.room
            and p.left_at is not null and p.joined_at < t.d1 and p.left_at >= t.d0
          offset 0
        ) p
      ),
      people as (
        select n, sum(extract(epoch from e - s)) as seconds, count(distinct who) as distinct_people
        from stays group by n
      ),
      running as (
        -- At one instant leaves count before joins, so a hand-over is not an overlap.
        select n, sum(delta) over (partition by n order by at, delta rows unbounded preceding) as present
        from (select n, s as at, 1 as delta from stays union all select n, e, -1 from stays) as points
      ),
      peaks as (select n, max(present) as peak from running group by n),
      media as (
        select t.n,
          sum(extract(epoch from greatest(least(m.ended_at, t.d1), m.started_at, t.d0) - greatest(m.started_at, t.d0))) filter (where m.kind = 'phone') as phone,
          sum(extract(epoch from greatest(least(m.ended_at, t.d1), m.started_at, t.d0) - greatest(m.started_at, t.d0))) filter (where m.kind = 'streaming') as streaming,
          sum(extract(epoch from greatest(least(m.ended_at, t.d1), m.started_at, t.d0) - greatest(m.started_at, t.d0))) filter (where m.kind = 'recording') as recording,
          max(m.peak_viewers) filter (where m.kind = 'streaming') as viewers
        from targets t
        cross join lateral (
          select * from media_sessions m
          where m.account_id = t.account_id and m.room = t.room
            and m.ended_at is not null and m.started_at < t.d1 and m.ended_at >= t.d0
          offset 0
        ) m
        group by t.n
      ),
      computed as (
        select t.account_id, t.room, t.day, round(coalesce(pe.seconds, 0)) as participant_seconds, coalesce(pk.peak, 0) as peak_participants,
          coalesce(pe.distinct_people, 0) as distinct_participants, round(coalesce(me.phone, 0)) as phone_seconds,
          round(coalesce(me.streaming, 0)) as streaming_seconds, round(coalesce(me.recording, 0)) as recording_seconds,
          coalesce(me.viewers, 0) as peak_viewers,
          pe.n is not null or me.n is not null as used
        from targets t
        left join people pe using (n)
        left join peaks pk using (n)
        left join media me using (n)
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
export async function publishSettledDays(tx: Database, days: SettledDay[]): Promise<void> {
  const byAccount = Map.groupBy(days, (day) => day.account_id);
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
