/**
 * Live folding in batches: rings of a room are gathered, and its fold takes every event of the
 * room not folded yet; an event stored while the room's fold runs is folded by the next pass.
 */
import { expect, test } from "bun:test";
import { eq } from "drizzle-orm";
import postgres from "postgres";
import { db } from "../../src/db/client";
import { roomUsageDaily } from "../../src/modules/usage/schema";
import { startCdrWorker } from "../../workers/cdr";
import { newAccount } from "../helpers";
import { storeStay, unfoldedCount } from "../support/stored-events";

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(25);
  }
}

test("a burst of rooms' events is folded by their rings, with no sweep", async () => {
  const account = await newAccount();
  const worker = startCdrWorker({ concurrency: 4, sweepIntervalMs: 600_000 });
  try {
    await worker.ready;
    for (let i = 0; i < 150; i++) await storeStay(account.accountId, "burst", `p${i}@x/1`, 1 + (i % 10));
    for (let i = 0; i < 30; i++) await storeStay(account.accountId, "quiet", `q${i}@x/1`, 2);
    await until("every event to be folded", async () => (await unfoldedCount(account.accountId)) === 0);
  } finally {
    await worker.stop();
  }
  const days = await db.select().from(roomUsageDaily).where(eq(roomUsageDaily.accountId, account.accountId));
  const expected = Array.from({ length: 150 }, (_, i) => 60 * (1 + (i % 10))).reduce((sum, n) => sum + n, 0);
  expect(Object.fromEntries(days.map((day) => [day.room, [day.participantSeconds, day.distinctParticipants]]))).toEqual(
    {
      burst: [expected, 150],
      quiet: [30 * 120, 30],
    },
  );
});

test("an event stored while its room's fold runs is folded by the next pass, not left to the sweep", async () => {
  const account = await newAccount();
  // Hold the room's fold lock, so the first fold is caught inside its transaction.
  const blocker = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
  await blocker`select pg_advisory_lock(hashtextextended(${`${account.accountId}|busy`}, 0))`;
  const worker = startCdrWorker({ concurrency: 2, sweepIntervalMs: 600_000 });
  try {
    await worker.ready;
    await storeStay(account.accountId, "busy", "first@x/1", 5);
    await until("the room's fold to wait for its lock", async () => {
      const [row] =
        await blocker`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%pg_advisory_xact_lock%'`;
      return row!.n > 0;
    });
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
