/**
 * What the usage report's read-after-write step costs when nothing is pending. Run by hand:
 *
 *   BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/scratch bun test/bench/report-read-after-write.bench.ts
 *
 * WIPES the database it is given. It stores BENCH_RAW_ROOMS (default 2,000) meetings of
 * BENCH_RAW_PEOPLE (default 10) stays each over a week for one account, folds them, and
 * then, taking turns in the same run, times the report as the API builds it (the step, then
 * the read) and the same report without the step, for one room and for every room, and the
 * step alone, once the unfolded list is vacuumed (and the step alone before that, right after
 * the fold). Target: the step costs < 10 ms when nothing is pending.
 */
import { sql } from "drizzle-orm";
import { benchDatabase, closeBench, startBench, wipeDatabase } from "../support/bench";

const databaseUrl = benchDatabase("BENCH_DATABASE_URL to a database this benchmark may wipe");
const ROOMS = Number(process.env.BENCH_RAW_ROOMS ?? 2_000);
const PEOPLE = Number(process.env.BENCH_RAW_PEOPLE ?? 10);
const CALLS = Number(process.env.BENCH_RAW_CALLS ?? 200);

await wipeDatabase(databaseUrl);
const services = await startBench();
const { db } = await import("../../src/db/client");
const { createAccount } = await import("../../src/modules/accounts/service");
const { storeEvents } = await import("../../src/modules/conference-log/service");
const { foldBeforeReport, sweepUnfolded } = await import("../../src/modules/usage/fold");
const { describeMeetings } = await import("../../src/modules/usage/meetings");
const { prepareReport } = await import("../../src/modules/usage/meeting-lives");
const { reportDays } = await import("../../src/modules/usage/report-days");
const { reportWindow } = await import("../../src/modules/usage/report-window");
const { reportTotals, usageReport } = await import("../../src/modules/usage/service");

const { account } = await createAccount("bench-raw", "EdDSA");
const accountId = account.id;
const WEEK_START = Date.parse("2026-10-01T00:00:00Z") / 1000;

// Room r meets on day r % 7 at an hour of its own; person p joins 30p s in and stays 20 min.
type Event = Parameters<typeof storeEvents>[1][number];
const events: Event[] = [];
for (let r = 0; r < ROOMS; r++) {
  const room = `room-${r}`;
  const start = WEEK_START + (r % 7) * 86_400 + 8 * 3600 + (r % 600) * 10;
  const fields = { room_name: room, room_jid: `${room}@conference.meet.example.com`, is_breakout: false };
  const event = (
    kind: Event["kind"],
    at: number,
    payload: Record<string, unknown>,
    dedupeKey: string,
    subject?: string,
  ): Event => ({
    accountId,
    kind,
    room,
    occurredAt: new Date(at * 1000),
    subject,
    payload: { ...fields, ...payload },
    dedupeKey,
  });
  events.push(event("room_created", start, { event_name: "muc-room-created", created_at: start }, `c|${room}`));
  for (let p = 0; p < PEOPLE; p++) {
    const occupant = { occupant_jid: `u${p}@meet.example.com/${room}`, id: `user-${p}`, joined_at: start + 30 * p };
    events.push(
      event(
        "occupant_joined",
        occupant.joined_at,
        { event_name: "muc-occupant-joined", occupant },
        `j|${room}|${p}`,
        occupant.occupant_jid,
      ),
    );
    const left = { ...occupant, left_at: occupant.joined_at + 1200 };
    events.push(
      event(
        "occupant_left",
        left.left_at,
        { event_name: "muc-occupant-left", occupant: left },
        `l|${room}|${p}`,
        occupant.occupant_jid,
      ),
    );
  }
  events.push(
    event(
      "room_destroyed",
      start + 1800,
      { event_name: "muc-room-destroyed", created_at: start, destroyed_at: start + 1800, all_occupants: {} },
      `d|${room}`,
    ),
  );
}
for (let i = 0; i < events.length; i += 5_000) await storeEvents(db, events.slice(i, i + 5_000));
const folded = await sweepUnfolded(0);
console.log(`stored and folded ${folded} events: ${ROOMS} meetings of ${PEOPLE} stays over a week`);

const percentile = (values: number[], p: number) =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(values.length * p))]!;
const time = async (run: () => Promise<unknown>) => {
  // Garbage of the call before (a week's report is tens of megabytes) is collected first, not inside the next timing.
  Bun.gc(true);
  const started = performance.now();
  await run();
  return performance.now() - started;
};

// Right after the burst the unfolded list's index still holds an entry per folded event until
// (auto)vacuum clears them, and the probe steps over them; after it, the probe finds nothing at once.
const beforeVacuum: number[] = [];
for (let i = 0; i < 20; i++) beforeVacuum.push(await time(() => foldBeforeReport(accountId, [], new Date())));
console.log(
  `the step right after the fold, every room: p50 ${percentile(beforeVacuum, 0.5).toFixed(2)} ms, ` +
    `p95 ${percentile(beforeVacuum, 0.95).toFixed(2)} ms`,
);
await db.execute(sql`vacuum analyze conference_events_unfolded`);

const weekQuery = { startDate: "2026-10-01T00:00:00Z", endDate: "2026-10-08T00:00:00Z" };
const oneRoomQuery = { ...weekQuery, roomNames: ["room-7"] };

/** The report as usageReport builds it, without the step: the window, the read, the days and totals. */
async function reportWithoutStep(query: typeof weekQuery & { roomNames?: string[] }) {
  const now = new Date();
  const prepared = await prepareReport(accountId, reportWindow(query, now), now, db);
  const meetings = await describeMeetings(prepared);
  return { rooms: meetings.length, days: reportDays(meetings, now).length, totals: reportTotals(meetings) };
}

// Both give the same figures: the step changes nothing when nothing is pending.
const [whole, bare] = [await usageReport(accountId, weekQuery), await reportWithoutStep(weekQuery)];
if (whole.totals.participant_minutes !== bare.totals.participant_minutes || whole.rooms.length !== bare.rooms) {
  throw new Error(`the reports differ: ${JSON.stringify(whole.totals)} vs ${JSON.stringify(bare.totals)}`);
}
console.log(
  `check: ${whole.rooms.length} meetings, ${whole.totals.participant_minutes} participant minutes, both ways`,
);

const p50 = (values: number[]) => percentile(values, 0.5);
const ms = (value: number) => value.toFixed(2);
for (const [label, query, calls] of [
  ["one room", oneRoomQuery, CALLS],
  ["every room, a week", weekQuery, Math.max(10, Math.floor(CALLS / 10))],
] as const) {
  const withStep: number[] = [];
  const withoutStep: number[] = [];
  // Taking turns, so both see the same machine load; the first turns warm the connections and the planner up.
  for (let i = 0; i < calls + 5; i++) {
    const a = await time(() => usageReport(accountId, query));
    const b = await time(() => reportWithoutStep(query));
    if (i < 5) continue;
    withStep.push(a);
    withoutStep.push(b);
  }
  // The step alone, in a loop of its own.
  const rooms = "roomNames" in query ? query.roomNames : [];
  const step: number[] = [];
  for (let i = 0; i < CALLS; i++) step.push(await time(() => foldBeforeReport(accountId, rooms, new Date())));
  console.log(
    `report, ${label}: with the step p50 ${ms(p50(withStep))} ms (p95 ` +
      `${ms(percentile(withStep, 0.95))}), without p50 ${ms(p50(withoutStep))} ms ` +
      `(p95 ${ms(percentile(withoutStep, 0.95))}), ratio ` +
      `${(p50(withStep) / p50(withoutStep)).toFixed(2)}x, difference of the medians ` +
      `${ms(p50(withStep) - p50(withoutStep))} ms (${calls} calls each); the ` +
      `step alone p50 ${ms(p50(step))} ms, p95 ${ms(percentile(step, 0.95))} ms ` +
      `(${CALLS} calls; target < 10 ms: ${p50(step) < 10 ? "met" : "not met"} at the median)`,
  );
}
await closeBench(services);
