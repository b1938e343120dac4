/**
 * A usage report reflects every event acknowledged before it was asked for: event_sync
 * deliveries posted as Prosody posts them, the report read at once after each, with no cdr
 * worker running, with one running, and while a fold of the same room is caught in flight.
 */
import { describe, expect, test } from "bun:test";
import { eq } from "drizzle-orm";
import postgres from "postgres";
import { db } from "../../src/db/client";
import { accounts } from "../../src/modules/accounts/schema";
import { type ConferenceEvent, storeEvents } from "../../src/modules/conference-log/service";
import { startCdrWorker } from "../../workers/cdr";
import { call, newAccount } from "../helpers";
import {
  at,
  type Delivery,
  deliver,
  occupantJoined,
  occupantLeft,
  type Person,
  roomCreated,
  roomDestroyed,
} from "../support/event-sync";
import { unfoldedCount } from "../support/stored-events";
import { until } from "../support/wait";

const ROUTE = "/api/v1/pricing/cdr";
const WINDOW = { start_date: "2026-11-20T00:00:00Z" };
const minutes = (seconds: number) => Math.round((seconds / 60) * 100) / 100;

interface Expected {
  status: "active" | "inactive";
  /** Per stay: who, when they joined and left (unix seconds; left undefined while present). */
  stays: Array<{ who: Person; joined: number; left?: number }>;
}

/** One meeting of `room`, delivery by delivery, with what the report must show after each. */
function meeting(room: string): Array<[Delivery, Expected]> {
  const ann: Person = { name: "Ann", id: "ann", occupant_jid: `${room}-a@meet.example.com/A1` };
  const ben: Person = { name: "Ben", id: "ben", occupant_jid: `${room}-b@meet.example.com/B1` };
  const created = at("10:00:00");
  const annIn = at("10:00:05");
  const benIn = at("10:01:00");
  const annOut = at("10:29:10");
  const benOut = at("10:30:00");
  return [
    [roomCreated(room, created), { status: "active", stays: [] }],
    [occupantJoined(room, ann, annIn, 1), { status: "active", stays: [{ who: ann, joined: annIn }] }],
    [
      occupantJoined(room, ben, benIn, 2),
      {
        status: "active",
        stays: [
          { who: ann, joined: annIn },
          { who: ben, joined: benIn },
        ],
      },
    ],
    [
      occupantLeft(room, ann, annIn, annOut, 1),
      {
        status: "active",
        stays: [
          { who: ann, joined: annIn, left: annOut },
          { who: ben, joined: benIn },
        ],
      },
    ],
    [
      occupantLeft(room, ben, benIn, benOut, 0),
      {
        status: "active",
        stays: [
          { who: ann, joined: annIn, left: annOut },
          { who: ben, joined: benIn, left: benOut },
        ],
      },
    ],
    // The destroy lists nobody: both had left.
    [
      roomDestroyed(room, created, at("10:31:00"), []),
      {
        status: "inactive",
        stays: [
          { who: ann, joined: annIn, left: annOut },
          { who: ben, joined: benIn, left: benOut },
        ],
      },
    ],
  ];
}

/** Asks for the report of `room` and checks it against what was acknowledged, to the second of its as_of. */
async function expectCurrent(apiKey: string, room: string, expected: Expected) {
  const asked = Date.now();
  const answer = await call("POST", ROUTE, {
    body: { ...WINDOW, room_name: [room] },
    headers: { authorization: `Bearer ${apiKey}` },
  });
  expect(answer.status).toBe(200);
  const report = answer.body;
  const asOf = Date.parse(report.as_of);
  expect(asOf).toBeGreaterThanOrEqual(asked);
  // An open stay counts up to as_of, in whole seconds.
  const seconds = expected.stays.map((stay) =>
    stay.left === undefined ? Math.round((asOf - stay.joined * 1000) / 1000) : stay.left - stay.joined,
  );
  expect(report.rooms.map((entry: any) => entry.status)).toEqual([expected.status]);
  expect(report.rooms[0].users.map((user: any) => [user.user_id, user.joined_at, user.left_at, user.minutes])).toEqual(
    expected.stays.map((stay, index) => [
      stay.who.id,
      new Date(stay.joined * 1000).toISOString(),
      stay.left === undefined ? null : new Date(stay.left * 1000).toISOString(),
      minutes(seconds[index]!),
    ]),
  );
  const total = minutes(seconds.reduce((sum, value) => sum + value, 0));
  expect(report.totals).toMatchObject({
    participant_minutes: total,
    open_stays: expected.stays.filter((stay) => stay.left === undefined).length,
  });
  // The days hold the same stays (an open one split at each midnight
  // up to as_of): they add up to the total, each rounded on its own.
  const days = report.days.map((day: any) => day.participant_minutes as number);
  expect(days.length === 0).toBe(expected.stays.length === 0);
  expect(Math.abs(days.reduce((sum: number, value: number) => sum + value, 0) - total)).toBeLessThanOrEqual(
    0.005 * days.length + 1e-9,
  );
}

async function replayReadingEachStep(apiKey: string, room: string) {
  for (const [delivery, expected] of meeting(room)) {
    expect((await deliver(apiKey, delivery)).status).toBe(200);
    await expectCurrent(apiKey, room, expected);
  }
}

describe("the usage report after acknowledged events", () => {
  test("with no cdr worker running, each report folds what was acknowledged before it", async () => {
    const account = await newAccount();
    await replayReadingEachStep(account.apiKey, "solo");
    expect(await unfoldedCount(account.accountId)).toBe(0);
  });

  test("with a cdr worker folding at the same time, each report is exact", async () => {
    const worker = startCdrWorker({ concurrency: 4 });
    try {
      await worker.ready;
      // Rooms replayed at once (an account each: a report is rate-limited per account), so the
      // reports meet the worker's folds of other rooms and of their own.
      await Promise.all(
        ["race-1", "race-2", "race-3", "race-4"].map(async (room) =>
          replayReadingEachStep((await newAccount()).apiKey, room),
        ),
      );
    } finally {
      await worker.stop();
    }
  });

  test("a report waits for a fold of its room caught in flight, and then counts what it folded", async () => {
    const account = await newAccount();
    const steps = meeting("held");
    for (const [delivery] of steps.slice(0, 3)) expect((await deliver(account.apiKey, delivery)).status).toBe(200);
    await expectCurrent(account.apiKey, "held", steps[2]![1]);

    // Hold the room's fold lock from outside: the worker's fold takes the leave off the unfolded list, then waits.
    const blocker = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
    await blocker`select pg_advisory_lock(hashtextextended(${`${account.accountId}|held`}, 0))`;
    const worker = startCdrWorker({ concurrency: 1 });
    try {
      await worker.ready;
      expect((await deliver(account.apiKey, steps[3]![0])).status).toBe(200);
      const folding = await until(
        async () =>
          (
            await blocker`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%pg_advisory_xact_lock%'`
          )[0]!.n,
        (n) => n > 0,
      );
      expect(folding).toBeGreaterThan(0);
      const report = expectCurrent(account.apiKey, "held", steps[3]![1]);
      // The report waits on the leave's row, which the fold in flight holds.
      const waiting = await until(
        async () =>
          (
            await blocker`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%for update of "conference_events_unfolded"%'`
          )[0]!.n,
        (n) => n > 0,
      );
      expect(waiting).toBeGreaterThan(0);
      await blocker`select pg_advisory_unlock_all()`;
      await report;
    } finally {
      await blocker.end();
      await worker.stop();
    }
  });

  test("a backlog beyond what a report folds is left to the worker; as_of says how far it is complete", async () => {
    const account = await newAccount();
    // More joins than one report folds (5,000), stored at once as a burst the worker has not reached.
    // A second apart: thousands of stays of an account joined in the same second make the fold's
    // look-up of earlier stays by (account, join time) scan them all, each (left alone here).
    const joined = (index: number) => at("09:00:00") + index;
    const events: ConferenceEvent[] = Array.from({ length: 5_200 }, (_, index) => ({
      accountId: account.accountId,
      kind: "occupant_joined",
      room: `crowd-${index % 40}`,
      occurredAt: new Date(joined(index) * 1000),
      subject: `p${index}@meet.example.com/1`,
      payload: {
        event_name: "muc-occupant-joined",
        room_name: `crowd-${index % 40}`,
        occupant: { occupant_jid: `p${index}@meet.example.com/1`, joined_at: joined(index) },
      },
      dedupeKey: `join|${index}`,
    }));
    const stored = await db.transaction(async (tx) => {
      await storeEvents(tx, events);
      return new Date();
    });
    const asked = Date.now();
    const first = await call("POST", ROUTE, { body: WINDOW, headers: { authorization: `Bearer ${account.apiKey}` } });
    expect(first.status).toBe(200);
    // Complete up to when the events left unfolded were stored, not up to when it was asked for.
    expect(Date.parse(first.body.as_of)).toBeLessThan(asked);
    expect(Date.parse(first.body.as_of)).toBeLessThanOrEqual(stored.getTime());
    expect(first.body.totals.open_stays).toBe(5_000);
    expect(await unfoldedCount(account.accountId)).toBe(200);
    const second = await call("POST", ROUTE, { body: WINDOW, headers: { authorization: `Bearer ${account.apiKey}` } });
    expect(Date.parse(second.body.as_of)).toBeGreaterThanOrEqual(asked);
    expect(second.body.totals.open_stays).toBe(5_200);
    // Its log and usage go with the account, so later tests that refold every account's log do not fold it too.
    await db.delete(accounts).where(eq(accounts.id, account.accountId));
  }, 60_000);
});
