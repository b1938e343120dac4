/**
 * Folding and reporting at scale. Run by hand:
 *
 *   BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/parley_usage bun test/bench/cdr.bench.ts
 *
 * WIPES the database it is given. It writes BENCH_EVENTS (default 1,000,000) event_sync
 * events over BENCH_ROOMS (default 10,000) room lives straight into the log with
 * generate_series, folds them with the cdr fold the worker runs (in pages, as a refold
 * does), and prints that time beside one SQL aggregation of participant seconds over the
 * same raw rows, with the ratio, and beside its floor (the stays alone, one statement): the
 * fold and its floor are timed BENCH_ROUNDS times (default 3) from the same unfolded state,
 * and the median ratio is the figure. Then it times POST /api/v1/pricing/cdr over the 10,000 rooms.
 */
import { benchDatabase, median, startBench, wipeDatabase } from "../support/bench";

const databaseUrl = benchDatabase("BENCH_DATABASE_URL to a database this benchmark may wipe");
process.env.DATABASE_POOL_SIZE = "4";

const ROOMS = Number(process.env.BENCH_ROOMS ?? 10_000);
const EVENTS = Number(process.env.BENCH_EVENTS ?? 1_000_000);
/** Per room: create, destroy, a stream's start and stop, and a join and a leave per participant. */
const PARTICIPANTS = Math.max(1, Math.floor((EVENTS / ROOMS - 4) / 2));
const REPORT_CALLS = Number(process.env.BENCH_REPORT_CALLS ?? 200);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

await wipeDatabase(databaseUrl);
const { default: postgres } = await import("postgres");
const admin = postgres(databaseUrl, { max: 1, onnotice: () => {} });

const services = await startBench();
const { createAccount } = await import("../../src/modules/accounts/service");
const { REFOLD_PAGE, refoldLog, sweepUnfolded } = await import("../../src/modules/usage/fold");
// Pages as `refold-usage` makes them.
const PAGE = Number(process.env.BENCH_PAGE ?? REFOLD_PAGE);
const { createApp } = await import("../../src/process/app");

const { account, apiKey } = await createAccount("bench", "EdDSA");
// The bench measures the report, not the per-account limits (docs/limits.md): lift them for its account.
const { setLimit } = await import("../../src/modules/limits/service");
for (const name of ["requests.usage", "requests.per_key"] as const) await setLimit(account.id, name, 1_000_000_000);
const seconds = (ms: number) => (ms / 1000).toFixed(2);
const time = async <T>(run: () => Promise<T>): Promise<[T, number]> => {
  const started = performance.now();
  const result = await run();
  return [result, performance.now() - started];
};

// Room r lives on day r % 28 from 2026-10-01 for 4000 s; participant p joins 10p s after the
// start and leaves 600 + (37p mod 3000) s after it; the room is streamed and recorded from
// 100 s to 1900 s. Rows are inserted in time order, interleaving rooms as live traffic does.
const [, loadMs] = await time(() =>
  admin.unsafe(
    `
  with rooms as (
    select r, 'room-' || r as name, extract(epoch from timestamptz '2026-10-01 08:00:00+00' + (r % 28) * interval '1 day' + (r % 600) * interval '1 second')::bigint as start
    from generate_series(0, $2 - 1) as r
  ),
  people as (
    select rooms.*, p, 'u' || p || '@meet.example.com/r' || r as jid, start + 10 * p as joined, start + 600 + (37 * p) % 3000 as left_at
    from rooms, generate_series(0, $3 - 1) as p
  ),
  base as (
    select name, jsonb_build_object('room_name', name, 'room_jid', name || '@conference.meet.example.com', 'is_breakout', false) as fields, start
    from rooms
  ),
  events as (
    select 'room_created' as kind, name as room, start as at, null::text as subject, name || '@conference.meet.example.com' as room_jid,
      to_timestamp(start) as started_at, null::timestamptz as ended_at, '[]'::jsonb as occupants,
      b.fields || jsonb_build_object('event_name', 'muc-room-created', 'created_at', start) as payload,
      'room_created|' || name || '||' || start as dedupe
    from base b
    union all
    select 'room_destroyed', name, start + 4000, null, name || '@conference.meet.example.com', to_timestamp(start), to_timestamp(start + 4000), '[]'::jsonb,
      b.fields || jsonb_build_object('event_name', 'muc-room-destroyed', 'created_at', start, 'destroyed_at', start + 4000, 'all_occupants', '{}'::jsonb),
      'room_destroyed|' || name || '||' || start
    from base b
    union all
    select 'occupant_joined', name, joined, jid, null, null, null,
      jsonb_build_array(jsonb_build_object('jid', jid, 'userId', 'user-' || p, 'name', 'User ' || p, 'joinedAt', to_timestamp(joined))),
      jsonb_build_object('event_name', 'muc-occupant-joined', 'room_name', name, 'is_breakout', false,
        'occupant', jsonb_build_object('occupant_jid', jid, 'id', 'user-' || p, 'name', 'User ' || p, 'joined_at', joined)),
      'occupant_joined|' || name || '||' || jid || '|' || joined
    from people
    union all
    select 'occupant_left', name, left_at, jid, null, null, null,
      jsonb_build_array(jsonb_build_object('jid', jid, 'userId', 'user-' || p, 'name', 'User ' || p, 'joinedAt', to_timestamp(joined), 'leftAt', to_timestamp(left_at))),
      jsonb_build_object('event_name', 'muc-occupant-left', 'room_name', name, 'is_breakout', false,
        'occupant', jsonb_build_object('occupant_jid', jid, 'id', 'user-' || p, 'name', 'User ' || p, 'joined_at', joined, 'left_at', left_at)),
      'occupant_left|' || name || '||' || jid || '|' || joined
    from people
    union all
    select 'stream_started', name, start + 100, name || '-live', null, null, null, '[]'::jsonb, '{"recording": true}'::jsonb, 'stream_started|' || name from rooms
    union all
    select 'stream_stopped', name, start + 1900, name || '-live', null, null, null, '[]'::jsonb, '{"recording": true}'::jsonb, 'stream_stopped|' || name from rooms
  )
  insert into conference_events (account_id, kind, room, occurred_at, subject, room_jid, started_at, ended_at, occupants, payload, dedupe_key)
  select $1, kind, room, to_timestamp(at), subject, room_jid, started_at, ended_at, occupants, payload, dedupe from events order by at, room`,
    [account.id, ROOMS, PARTICIPANTS],
  ),
);
await admin.unsafe("analyze");
const [{ count }] = (await admin.unsafe("select count(*)::int as count from conference_events")) as unknown as [
  { count: number },
];
console.log(
  `log: ${count} events over ${ROOMS} rooms (${PARTICIPANTS} participants each), written in ${seconds(loadMs)} s`,
);

const [folded, foldMs] = await time(() => refoldLog({ pageSize: PAGE }));
console.log(
  `fold: ${folded} events in ${seconds(foldMs)} s (${Math.round(folded / (foldMs / 1000))} events/s, pages of ${PAGE})`,
);

// The reference: participant seconds per room and day, paired straight from the raw rows in one statement.
const referenceSql = `
  select room, (to_timestamp(joined) at time zone 'UTC')::date as day, sum(left_at - joined) as seconds
  from (
    select room, subject, (payload->'occupant'->>'joined_at')::bigint as joined,
      max((payload->'occupant'->>'left_at')::bigint) as left_at
    from conference_events where account_id = $1 and kind in ('occupant_joined', 'occupant_left')
    group by room, subject, (payload->'occupant'->>'joined_at')::bigint
  ) as stays
  where left_at is not null
  group by room, day`;
const [reference, sqlMs] = await time(() => admin.unsafe(referenceSql, [account.id]));
console.log(`one SQL aggregation over the raw rows: ${reference.length} room-days in ${seconds(sqlMs)} s`);
console.log(`ratio fold / SQL aggregation: ${(foldMs / sqlMs).toFixed(1)}x`);

// A floor for any fold: the same stays paired from the same rows and written by one INSERT … SELECT
// into an empty copy of participant_sessions with its indexes,
// logged like it (no foreign key, no lives, days or media).
await admin.unsafe("create table stays_floor (like participant_sessions including defaults including indexes)");
/** The floor's time: its statement into the empty copy, emptied again after. */
const floorOnce = async () => {
  const [, ms] = await time(() =>
    admin.unsafe(
      `insert into stays_floor (account_id, room, occupant_jid, user_id, name, joined_at, left_at)
      select account_id, room, payload->'occupant'->>'occupant_jid', min(payload->'occupant'->>'id'), min(payload->'occupant'->>'name'),
        to_timestamp((payload->'occupant'->>'joined_at')::bigint), max(to_timestamp((payload->'occupant'->>'left_at')::bigint))
      from conference_events where account_id = $1 and kind in ('occupant_joined', 'occupant_left')
      group by account_id, room, payload->'occupant'->>'occupant_jid', payload->'occupant'->>'joined_at'`,
      [account.id],
    ),
  );
  await admin.unsafe("truncate stays_floor");
  return ms;
};
const floorMs = await floorOnce();
console.log(
  "writing the stays alone (one INSERT … SELECT into an empty indexed copy): " +
    `${seconds(floorMs)} s = ${(floorMs / sqlMs).toFixed(1)}x the aggregation`,
);
console.log(`ratio fold / the stays alone: ${(foldMs / floorMs).toFixed(2)}x`);

// The same stays written in the refold's pages (whole rooms, about PAGE events), two pages at once
// as the refold folds them, each its own transaction, upserted as the fold must (a stay's halves may
// come in two pages): what paging itself costs, beside the one statement above.
const rooms = (await admin.unsafe(
  "select room, count(*)::int as events from conference_events where account_id = $1 group by room order by room",
  [account.id],
)) as unknown as Array<{ room: string; events: number }>;
const floorPages: string[][] = [[]];
let pageEvents = 0;
for (const { room, events } of rooms) {
  if (floorPages.at(-1)!.length > 0 && pageEvents + events > PAGE) {
    floorPages.push([]);
    pageEvents = 0;
  }
  floorPages.at(-1)!.push(room);
  pageEvents += events;
}
const pagedWriter = postgres(databaseUrl, { max: 2, onnotice: () => {} });
const pending = floorPages.values();
const [, pagedMs] = await time(() =>
  Promise.all(
    [1, 2].map(async () => {
      for (const page of pending)
        await pagedWriter.begin((tx) =>
          tx.unsafe(
            `insert into stays_floor as s (account_id, room, occupant_jid, user_id, name, joined_at, left_at)
            select account_id, room, payload->'occupant'->>'occupant_jid', min(payload->'occupant'->>'id'),
              min(payload->'occupant'->>'name'), to_timestamp((payload->'occupant'->>'joined_at')::bigint),
              max(to_timestamp((payload->'occupant'->>'left_at')::bigint))
            from conference_events
            where account_id = $1 and room = any($2::text[]) and kind in ('occupant_joined', 'occupant_left')
            group by account_id, room, payload->'occupant'->>'occupant_jid', payload->'occupant'->>'joined_at'
            on conflict (account_id, room, joined_at, breakout_id, occupant_jid)
              do update set left_at = greatest(s.left_at, excluded.left_at)`,
            [account.id, page],
          ),
        );
    }),
  ),
);
await pagedWriter.end();
await admin.unsafe("truncate stays_floor");
console.log(
  `the stays alone in the refold's ${floorPages.length} pages, two at once: ${seconds(pagedMs)} s ` +
    `(fold / this: ${(foldMs / pagedMs).toFixed(2)}x)`,
);

const [sums] = (await admin.unsafe(
  "select sum(participant_seconds)::bigint as folded from room_usage_daily where account_id = $1",
  [account.id],
)) as unknown as [{ folded: string }];
const referenceTotal = reference.reduce((total, row) => total + Number(row.seconds), 0);
console.log(
  `check: folded participant seconds ${sums.folded}, SQL ${referenceTotal} ` +
    `-> ${Number(sums.folded) === referenceTotal ? "equal" : "DIFFERENT"}`,
);

/** Every event of the log on the unfolded list again, as the load's trigger left them. */
const listWholeLog = () =>
  admin.unsafe(`insert into conference_events_unfolded (event_id, account_id, room)
    select id, account_id, room from conference_events`);

// The first fold and its floor again, BENCH_ROUNDS in all, from the same unfolded state (the
// usage tables emptied, the whole log listed and analysed as after the load): on a shared
// machine one pair of runs moved the ratio by a tenth either way, their median much less.
const ratios = [foldMs / floorMs];
for (let round = 2; round <= ROUNDS; round++) {
  // The list truncated too: emptied by the fold, it holds a million dead rows the first round's did not.
  await admin.unsafe(
    "truncate participant_sessions, room_sessions, media_sessions, room_usage_daily, conference_events_unfolded",
  );
  await listWholeLog();
  await admin.unsafe("analyze");
  const [, againMs] = await time(() => refoldLog({ pageSize: PAGE }));
  const floorAgainMs = await floorOnce();
  ratios.push(againMs / floorAgainMs);
  console.log(
    `round ${round}: fold ${seconds(againMs)} s, the stays alone ${seconds(floorAgainMs)} s, ` +
      `ratio ${(againMs / floorAgainMs).toFixed(2)}x`,
  );
}
console.log(
  `ratio fold / the stays alone, median of ${ratios.length} rounds: ${median(ratios).toFixed(2)}x (target <= 1.5; ` +
    `${ratios.map((ratio) => ratio.toFixed(2)).join(", ")})`,
);
await admin.unsafe("drop table stays_floor");

// A backlog, as after every cdr worker was down for a long time: the whole log listed as unfolded
// again and folded by the sweep, which needs no Redis.
await listWholeLog();
const [swept, sweepMs] = await time(() => sweepUnfolded(0));
console.log(
  `sweep of a backlog: ${swept} events in ${seconds(sweepMs)} s (${Math.round(swept / (sweepMs / 1000))} events/s)`,
);

// A refold as `refold-usage` runs on a deployment: every stay already folded, and the tables analysed
// as autovacuum leaves them, so the planner knows how big they are (with young statistics it took
// plans whose cost grew with the tables, which the fold's statements now rule out).
await admin.unsafe("analyze");
const [refolded, refoldMs] = await time(() => refoldLog({ pageSize: PAGE }));
console.log(
  `refold over the folded, analysed tables: ${refolded} events in ${seconds(refoldMs)} s ` +
    `(${Math.round(refolded / (refoldMs / 1000))} events/s)`,
);

const app = createApp();
/** One report call: its time to the first byte of the answer and to the last. */
const report = async (body: Record<string, unknown>) => {
  const started = performance.now();
  const response = await app.handle(
    new Request("http://parley.bench/api/v1/pricing/cdr", {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${apiKey.apiKey}` },
      body: JSON.stringify(body),
    }),
  );
  const reader = response.body!.getReader();
  let firstByteMs = 0;
  let bytes = 0;
  const chunks: Uint8Array[] = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (bytes === 0) firstByteMs = performance.now() - started;
    bytes += value.length;
    chunks.push(value);
  }
  if (response.status !== 200)
    throw new Error(`report failed: ${response.status} ${Buffer.concat(chunks).toString().slice(0, 200)}`);
  return { ms: performance.now() - started, firstByteMs, bytes };
};
const percentile = (values: number[], p: number) =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.ceil((p / 100) * values.length) - 1)]!;
const window = { start_date: "2026-10-01T00:00:00Z", end_date: "2026-10-29T00:00:00Z" };

const single: number[] = [];
for (let i = 0; i < REPORT_CALLS; i++)
  single.push((await report({ ...window, room_name: [`room-${(i * 7919) % ROOMS}`] })).ms);
console.log(
  `report, one room of ${ROOMS}, 28-day window: p50 ${percentile(single, 50).toFixed(1)} ms, ` +
    `p95 ${percentile(single, 95).toFixed(1)} ms (${REPORT_CALLS} calls)`,
);

const week: number[] = [];
const weekFirstByte: number[] = [];
let weekBytes = 0;
for (let i = 0; i < 10; i++) {
  const answer = await report({ start_date: "2026-10-01T00:00:00Z", end_date: "2026-10-08T00:00:00Z" });
  week.push(answer.ms);
  weekFirstByte.push(answer.firstByteMs);
  weekBytes = answer.bytes;
}
console.log(
  `report, every room, 7-day window (~${Math.round(ROOMS / 4)} rooms, ${(weekBytes / 1e6).toFixed(1)} MB): ` +
    `p50 ${percentile(week, 50).toFixed(0)} ms, p95 ${percentile(week, 95).toFixed(0)} ms, ` +
    `first byte p95 ${percentile(weekFirstByte, 95).toFixed(0)} ms (10 calls)`,
);

const all: number[] = [];
let allBytes = 0;
for (let i = 0; i < 3; i++) {
  const answer = await report(window);
  all.push(answer.ms);
  allBytes = answer.bytes;
}
console.log(
  `report, all ${ROOMS} rooms, 28-day window (${(allBytes / 1e6).toFixed(1)} MB): ` +
    `p95 ${percentile(all, 95).toFixed(0)} ms (3 calls)`,
);

// The live path: events appended one by one through appendEvent (each rings its room's fold)
// by 16 concurrent senders, as the API does, over 40 rooms; folded by one cdr worker.
const { appendEvent } = await import("../../src/modules/conference-log/service");
const { startCdrWorker } = await import("../../workers/cdr");
const LIVE = Number(process.env.BENCH_LIVE_EVENTS ?? 20_000);
const liveStart = Date.parse("2026-11-01T08:00:00Z");
const stayEvents = (tag: string, i: number) => {
  const room = `live-${tag}-${i % 40}`;
  const jid = `p${i}@meet.example.com/${tag}`;
  const joined = liveStart + i * 1000;
  const occupant = { occupant_jid: jid, id: `p${i}`, joined_at: joined / 1000 };
  const left = joined + 600_000;
  return [
    {
      accountId: account.id,
      kind: "occupant_joined" as const,
      room,
      occurredAt: new Date(joined),
      subject: jid,
      payload: { room_name: room, occupant },
      dedupeKey: `j|${jid}`,
    },
    {
      accountId: account.id,
      kind: "occupant_left" as const,
      room,
      occurredAt: new Date(left),
      subject: jid,
      payload: { room_name: room, occupant: { ...occupant, left_at: left / 1000 } },
      dedupeKey: `l|${jid}`,
    },
  ];
};
const send = async (tag: string) => {
  let next = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      for (let i = next++; i < LIVE / 2; i = next++) for (const event of stayEvents(tag, i)) await appendEvent(event);
    }),
  );
};
// Whether any of a tag's events is still listed: a probe of the list's room index that stops at the
// first. Counting them scanned the whole list, bloated by the backlog's sweep, and that poll took a
// core from the worker it timed (a quarter of a second per poll, most of the burst's time).
const unfoldedLive = async (tag: string) =>
  (
    await admin.unsafe(
      `select exists (select from conference_events_unfolded
         where account_id = $1 and room >= $2 and room < $3) as listed`,
      [account.id, `live-${tag}-`, `live-${tag}.`],
    )
  )[0]!.listed as boolean;
const untilFolded = async (tag: string) => {
  while (await unfoldedLive(tag)) await Bun.sleep(10);
};

// A burst: everything is stored before the worker starts (their rings reach nobody), then folded by its sweep.
const [, burstAppendMs] = await time(() => send("burst"));
// Timed from the worker's readiness (its connections and subscription, which a running worker
// has), its start printed apart; the first sweep comes within its interval (100 ms) of it.
const startedAt = performance.now();
const burstWorker = startCdrWorker({ sweepIntervalMs: 100, sweepMinAgeMs: 0 });
await burstWorker.ready;
const startMs = performance.now() - startedAt;
const [, burstMs] = await time(() => untilFolded("burst"));
await burstWorker.stop();
console.log(
  `worker, a burst: ${LIVE} events (appended in ${seconds(burstAppendMs)} s) folded in ` +
    `${seconds(burstMs)} s by one worker once ready (${Math.round(LIVE / (burstMs / 1000))} events/s; ` +
    `its start ${startMs.toFixed(0)} ms, ${Math.round(LIVE / ((burstMs + startMs) / 1000))} events/s with it)`,
);

// Live: the worker runs while the events arrive; how long after the last one is every room current?
const liveWorker = startCdrWorker();
const [, liveAppendMs] = await time(() => send("live"));
const [, lagMs] = await time(() => untilFolded("live"));
await liveWorker.stop();
console.log(
  `worker, live: ${LIVE} events appended at ${Math.round(LIVE / (liveAppendMs / 1000))} events/s; ` +
    `every room current ${lagMs.toFixed(0)} ms after the last one`,
);

await admin.end();
await services.stop();
// The API's Redis subscribers keep the event loop alive; the benchmark is done.
process.exit(0);
