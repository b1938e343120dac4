/**
 * Live folding in batches: a room has one fold job pending at a time, which folds every event
 * of the room not folded yet; an event stored while the room's job runs gets a job of its own.
 */
import { expect, test } from "bun:test";
import { eq } from "drizzle-orm";
import postgres from "postgres";
import { db } from "../../src/db/client";
import { conferenceEvents } from "../../src/modules/events/schema";
import { roomUsageDaily } from "../../src/modules/usage/schema";
import { getQueue, QUEUE_NAMES } from "../../src/queue/queues";
import { startCdrWorker } from "../../workers/cdr";
import { newAccount } from "../helpers";
import { foldQueued } from "../support/cdr-worker";
import { storeStay, unfoldedCount } from "../support/stored-events";

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(25);
  }
}

test("a burst of one room's events waits as one job, named by the room's latest event, folding them all", async () => {
  const account = await newAccount();
  const queue = getQueue(QUEUE_NAMES.cdr);
  for (let i = 0; i < 150; i++) await storeStay(account.accountId, "burst", `p${i}@x/1`, 1 + (i % 10));
  for (let i = 0; i < 30; i++) await storeStay(account.accountId, "quiet", `q${i}@x/1`, 2);

  // Other test files of this run share the queue: count this account's jobs only.
  const events = await db.select({ id: conferenceEvents.id, subject: conferenceEvents.subject }).from(conferenceEvents).where(eq(conferenceEvents.accountId, account.accountId));
  const ours = new Set(events.map((event) => `event-${event.id}`));
  const pending = (await queue.getJobs(["delayed", "waiting"])).filter((job) => ours.has(job.id!)).map((job) => job.id);
  const latest = (subject: string) => `event-${events.find((event) => event.subject === subject)!.id}`;
  expect(pending.sort()).toEqual([latest("p149@x/1"), latest("q29@x/1")].sort());

  await foldQueued();
  expect(await unfoldedCount(account.accountId)).toBe(0);
  const days = await db.select().from(roomUsageDaily).where(eq(roomUsageDaily.accountId, account.accountId));
  const expected = Array.from({ length: 150 }, (_, i) => 60 * (1 + (i % 10))).reduce((sum, n) => sum + n, 0);
  expect(Object.fromEntries(days.map((day) => [day.room, [day.participantSeconds, day.distinctParticipants]]))).toEqual({
    burst: [expected, 150],
    quiet: [30 * 120, 30],
  });
});

test("an event stored while its room's job runs is folded by the next job, not left to the sweep", async () => {
  const account = await newAccount();
  const queue = getQueue(QUEUE_NAMES.cdr);
  // Hold the room's fold lock, so the first job is caught inside its transaction.
  const blocker = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
  await blocker`select pg_advisory_lock(hashtextextended(${`${account.accountId}|busy`}, 0))`;
  const worker = startCdrWorker({ concurrency: 2, sweepIntervalMs: 600_000 });
  try {
    await storeStay(account.accountId, "busy", "first@x/1", 5);
    await until("the room's job to run", async () => (await queue.getJobCounts("active")).active! > 0);
    await storeStay(account.accountId, "busy", "second@x/1", 7);
    await blocker`select pg_advisory_unlock_all()`;
    await until("both events to be folded", async () => (await unfoldedCount(account.accountId)) === 0);
    const [day] = await db.select().from(roomUsageDaily).where(eq(roomUsageDaily.accountId, account.accountId));
    expect([day?.participantSeconds, day?.distinctParticipants]).toEqual([12 * 60, 2]);
  } finally {
    await blocker`select pg_advisory_unlock_all()`;
    await blocker.end();
    await worker.stop();
  }
});
