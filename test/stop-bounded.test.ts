/**
 * A process whose stop hangs still exits: a cdr worker's fold is held inside its transaction
 * by a lock taken from outside, so closing the worker would wait for ever; SIGTERM must end
 * the process once the grace period and its margin are over, and the job it held must still
 * be folded by another worker.
 */
import { expect, test } from "bun:test";
import { eq } from "drizzle-orm";
import postgres from "postgres";
import { db } from "../src/db/client";
import { conferenceEvents } from "../src/modules/events/schema";
import { redis } from "../src/queue/connection";
import { getQueue, QUEUE_NAMES } from "../src/queue/queues";
import { startCdrWorker } from "../workers/cdr";
import { newAccount } from "./helpers";
import { at, deliver, occupantLeft } from "./support/event-sync";
import { until } from "./support/wait";

const GRACE_MS = 1_000;
const entry = new URL("../src/index.ts", import.meta.url).pathname;

test("SIGTERM ends a cdr process whose fold never ends, after grace and margin; another worker folds it", async () => {
  const account = await newAccount();
  const queue = getQueue(QUEUE_NAMES.cdr);
  let jobId = "";
  // The fold takes this lock for the room inside its transaction (as test/workers/cdr.test.ts does).
  const blocker = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
  await blocker`select pg_advisory_lock(hashtextextended(${`${account.accountId}|stuck-room`}, 0))`;
  // Same Redis prefix as this test process: the child takes the job delivered here.
  const child = Bun.spawn([process.execPath, entry, "--role=cdr"], {
    env: { ...process.env, LOG_LEVEL: "silent", SHUTDOWN_GRACE_MS: String(GRACE_MS) },
    stdout: "ignore",
    stderr: "inherit",
  });
  try {
    await deliver(account.apiKey, occupantLeft("stuck-room", { id: "kim", occupant_jid: "k@meet.example.com/K" }, at("10:00:00"), at("10:30:00"), 0));
    const [event] = await db.select().from(conferenceEvents).where(eq(conferenceEvents.accountId, account.accountId));
    jobId = `event-${event!.id}`;
    const state = await until(async () => (await queue.getJob(jobId))?.getState(), (found) => found === "active", 15_000);
    expect(state).toBe("active");

    const signalled = Date.now();
    child.kill("SIGTERM");
    const code = await Promise.race([child.exited, Bun.sleep(15_000).then(() => "still running")]);
    expect(code).toBe(1);
    // Grace (1 s) and the 5 s margin, not for ever.
    expect(Date.now() - signalled).toBeGreaterThanOrEqual(GRACE_MS);
    expect(Date.now() - signalled).toBeLessThan(GRACE_MS + 5_000 + 3_000);
  } finally {
    child.kill("SIGKILL");
    await blocker`select pg_advisory_unlock_all()`;
    await blocker.end();
  }

  // The job the dead process held is not lost. Its lock would last 30 s, and BullMQ skips the
  // stalled check until the last run's marker expires: drop both so another worker takes it now.
  await redis().del(`${queue.toKey(jobId)}:lock`, queue.keys["stalled-check"]!);
  const taker = startCdrWorker({ concurrency: 1, stalledIntervalMs: 300 });
  try {
    const folded = await until(async () => (await queue.getJob(jobId))?.getState(), (found) => found === "completed", 15_000);
    expect(folded).toBe("completed");
  } finally {
    await taker.stop();
  }
}, 40_000);
