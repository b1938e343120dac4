/**
 * A request or a worker waiting for a stream's state is woken by the outbox: a move committed
 * in this process or in another rings the "stream-states" consumer, and the waiter reads the
 * row at once, well inside the consumer's 500 ms sweep; a move whose ring was lost is found by
 * that sweep.
 */
import { afterAll, expect, test } from "bun:test";
import { randomUUID } from "node:crypto";
import { eq } from "drizzle-orm";
import { db } from "../../src/db/client";
import { streams } from "../../src/modules/streaming/schema";
import { STREAM_STATES_CONSUMER, stopStateSubscriber, waitForStream } from "../../src/modules/streaming/state";
import { markRunning } from "../../src/modules/streaming/transitions";
import { pubsub } from "../../src/queue/redis-pubsub";
import { newAccount } from "../helpers";
import { until } from "../support/wait";
import { insertStartingStream } from "../support/streams";

afterAll(stopStateSubscriber);

/**
 * A ring's latency well inside the sweep, however busy the machine (5 to 70 ms measured, the
 * transition's transaction included): the sweep alone (or the old 500 ms poll) would pass 8 such
 * trials once in 1,500.
 */
const PROMPT_MS = 200;
const TRIALS = 8;

async function startingStream(accountId: string) {
  return insertStartingStream(accountId, `state-${randomUUID().slice(0, 8)}`);
}

/** Waits for the stream to leave `starting`; answers once the waiter has read the row a first time. */
async function waiting(streamId: string) {
  let reads = 0;
  const settled = waitForStream(
    streamId,
    (row) => {
      reads++;
      return row.state !== "starting";
    },
    10_000,
  ).then((row) => ({ row, at: performance.now() }));
  expect(
    await until(
      () => reads,
      (n) => n >= 1,
    ),
  ).toBeGreaterThanOrEqual(1);
  // Wrapped, so the caller's await does not wait for the waiter to settle.
  return { settled };
}

test("a move made by a transition wakes its waiter by the outbox's ring, at once", async () => {
  const { accountId } = await newAccount();
  const latencies: number[] = [];
  for (let trial = 0; trial < TRIALS; trial++) {
    const stream = await startingStream(accountId);
    const woken = await waiting(stream.id);
    const movedAt = performance.now();
    expect(await markRunning(stream.id)).toBe(true);
    const { row, at } = await woken.settled;
    expect(row.state).toBe("running");
    latencies.push(at - movedAt);
  }
  expect(latencies.filter((ms) => ms >= PROMPT_MS)).toEqual([]);
});

test("a move committed in another process wakes the waiter through the consumer's ring across processes", async () => {
  const { accountId } = await newAccount();
  const latencies: number[] = [];
  for (let trial = 0; trial < TRIALS; trial++) {
    const stream = await startingStream(accountId);
    const woken = await waiting(stream.id);
    // What another process's transition does: the row moves, and after the commit its outbox
    // rings over publish/subscribe.
    const movedAt = performance.now();
    await db.update(streams).set({ state: "running" }).where(eq(streams.id, stream.id));
    await pubsub().publish(
      `outbox:${STREAM_STATES_CONSUMER}`,
      JSON.stringify({ from: "another process", keys: [stream.id] }),
    );
    const { row, at } = await woken.settled;
    expect(row.state).toBe("running");
    latencies.push(at - movedAt);
  }
  expect(latencies.filter((ms) => ms >= PROMPT_MS)).toEqual([]);
});

test("a move whose ring was lost is found by the consumer's sweep", async () => {
  const { accountId } = await newAccount();
  const stream = await startingStream(accountId);
  const woken = await waiting(stream.id);
  const movedAt = performance.now();
  await db.update(streams).set({ state: "running" }).where(eq(streams.id, stream.id));
  const { row, at } = await woken.settled;
  expect(row.state).toBe("running");
  // The sweep runs every 500 ms; the margin is for a busy machine.
  expect(at - movedAt).toBeLessThan(2_500);
});
