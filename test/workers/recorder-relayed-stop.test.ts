/**
 * A stop job that lands on a worker other than the stream's owner relays the stop to the owner
 * (control, over publish/subscribe) and then waits for the row to finish: woken by the outbox's
 * ring of the owner's finishStream, not by a poll of the row.
 */
import { afterAll, expect, test } from "bun:test";
import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import type { Job } from "bullmq";
import { stopStateSubscriber } from "../../src/modules/streaming/state";
import { finishStream } from "../../src/modules/streaming/transitions";
import { redis, redisKey } from "../../src/queue/connection";
import type { RecorderStopJob } from "../../src/queue/queues";
import { pubsub } from "../../src/queue/redis-pubsub";
import { podCommands, stopJob } from "../../workers/recorder/jobs";
import { newAccount } from "../helpers";
import { recorderHost } from "../support/recorder-host";
import { insertStoppingStream } from "../support/streams";

afterAll(stopStateSubscriber);

/**
 * Well under the 200 ms the relaying job used to sleep between reads: that poll alone would
 * pass 8 trials once in 250.
 */
const PROMPT_MS = 100;
const TRIALS = 8;

test("the relaying worker's stop job ends as soon as the owner has finished the stream", async () => {
  const { accountId } = await newAccount();
  const owner = `owner-${randomUUID().slice(0, 8)}`;
  // The owner heart-beats, so the stop is relayed to it rather than finished by the relaying worker.
  await redis().set(redisKey("recorder", "pod", owner), hostname(), "PX", 60_000);
  const relaying = recorderHost("relaying");
  // The owner's side: each relayed stop finishes its stream, as stopLocal does once the recorder ended.
  const finishedAt = new Map<string, Promise<number>>();
  const ownerSubscription = pubsub().subscribe("test-owner", [podCommands(owner)], (_channel, message) => {
    const { streamId, reason } = JSON.parse(message) as RecorderStopJob;
    finishedAt.set(
      streamId,
      finishStream(streamId, ["stopping"], "stopped", reason).then(() => performance.now()),
    );
  });
  await ownerSubscription.ready;
  try {
    const latencies: number[] = [];
    for (let trial = 0; trial < TRIALS; trial++) {
      const room = `relayed-${randomUUID().slice(0, 8)}`;
      const row = await insertStoppingStream(accountId, room, owner);
      const job = { data: { streamId: row.id, reason: "requested" } } as Job<RecorderStopJob>;
      await stopJob(relaying, job);
      const ended = performance.now();
      expect(finishedAt.has(row.id)).toBe(true);
      // Below zero when the job woke before finishStream's own caller went on.
      latencies.push(ended - (await finishedAt.get(row.id)!));
    }
    expect(latencies.filter((ms) => ms >= PROMPT_MS)).toEqual([]);
  } finally {
    await ownerSubscription.close();
    await redis().del(redisKey("recorder", "pod", owner));
  }
});
