import { expect, test } from "bun:test";
import { spawn } from "bun";
import { eq } from "drizzle-orm";
import postgres from "postgres";
import { db } from "../../src/db/client";
import { conferenceEvents } from "../../src/modules/events/schema";
import { participantSessions } from "../../src/modules/usage/schema";
import { redis } from "../../src/queue/connection";
import { getQueue, QUEUE_NAMES } from "../../src/queue/queues";
import { startCdrWorker } from "../../workers/cdr";
import { newAccount } from "../helpers";
import { at, deliver, occupantLeft } from "../support/event-sync";

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 15_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(50);
  }
}

test("a fold job whose worker is killed mid-run is taken over by another worker and loses nothing", async () => {
  const account = await newAccount();
  const queue = getQueue(QUEUE_NAMES.cdr);
  // Hold the room's fold lock from outside, so the first worker is caught inside its transaction.
  const blocker = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
  await blocker`select pg_advisory_lock(hashtextextended(${`${account.accountId}|crash-room`}, 0))`;

  await deliver(account.apiKey, occupantLeft("crash-room", { id: "kim", occupant_jid: "k@meet.example.com/K" }, at("10:00:00"), at("10:30:00"), 0));
  const [event] = await db.select().from(conferenceEvents).where(eq(conferenceEvents.accountId, account.accountId));
  const job = await queue.getJob(`event-${event!.id}`);
  expect(job).toBeDefined();

  const child = spawn([process.execPath, "test/support/cdr-worker-process.ts"], { stdout: "pipe", stderr: "inherit", env: process.env });
  let taker: ReturnType<typeof startCdrWorker> | undefined;
  try {
    await until("the job to be taken", async () => (await queue.getJob(job!.id!))?.getState().then((state) => state === "active") ?? false);
    child.kill("SIGKILL");
    await child.exited;
    await blocker`select pg_advisory_unlock_all()`;
    expect(await db.select().from(participantSessions).where(eq(participantSessions.accountId, account.accountId))).toEqual([]);

    // Workers of earlier tests ran the stalled-job check with the default 30 s interval, and
    // BullMQ skips the check until that run's marker expires; drop it so the taker checks now.
    expect(queue.keys["stalled-check"]).toEndWith(":cdr:stalled-check");
    await redis().del(queue.keys["stalled-check"]!);
    taker = startCdrWorker({ concurrency: 1, lockDurationMs: 1_000, stalledIntervalMs: 300 });
    await until("the stalled job to be done", async () => (await (await queue.getJob(job!.id!))?.getState()) === "completed");
    const stays = await db.select().from(participantSessions).where(eq(participantSessions.accountId, account.accountId));
    expect(stays.map((stay) => [stay.userId, stay.joinedAt.toISOString(), stay.leftAt?.toISOString()])).toEqual([
      ["kim", "2026-11-20T10:00:00.000Z", "2026-11-20T10:30:00.000Z"],
    ]);
  } finally {
    child.kill("SIGKILL");
    await taker?.stop();
    await blocker.end();
  }
}, 30_000);
