/**
 * A start job that reaches a full worker while another has room is handed to that one at
 * once. Before, the job only went back to the queue for its next offer, and BullMQ gave it to
 * the full worker again and again (for as long as 20 s, the other idle): here no job is in the
 * queue at all, so only the hand-off can start the stream.
 */
import { afterAll, expect, test } from "bun:test";
import { DelayedError, type Job } from "bullmq";
import { eq } from "drizzle-orm";
import { config } from "../../src/core/config";
import { db } from "../../src/db/client";
import { streams } from "../../src/modules/streaming/schema";
import { stopStateSubscriber } from "../../src/modules/streaming/state";
import type { RecorderStartJob } from "../../src/queue/queues";
import { startRecorderWorker } from "../../workers/recorder";
import { commandDriver } from "../../workers/recorder/command";
import { startJob } from "../../workers/recorder/jobs";
import { newAccount } from "../helpers";
import { recorderHost } from "../support/recorder-host";
import { insertStartingStream } from "../support/streams";
import { until } from "../support/wait";

afterAll(stopStateSubscriber);

test("a full worker hands a start to the worker that has room, without the job's next offer", async () => {
  const { accountId } = await newAccount();
  const roomy = await startRecorderWorker(commandDriver("echo ready; exec sleep 60"));
  try {
    // Full: as many starts under way as STREAMING_CAPACITY allows.
    const full = recorderHost("full", { reserved: config.streaming.capacity });
    const stream = await insertStartingStream(accountId, "handed");
    let delayedTo: number | undefined;
    const job = {
      data: { streamId: stream.id, destinations: [] },
      moveToDelayed: async (at: number) => {
        delayedTo = at;
      },
    } as unknown as Job<RecorderStartJob>;
    const offered = Date.now();
    await expect(startJob(full, job, "token")).rejects.toBeInstanceOf(DelayedError);
    // The job itself still comes back: the backstop, should the hand-off be lost.
    expect(delayedTo).toBeGreaterThan(offered);
    const running = await until(
      async () => (await db.select().from(streams).where(eq(streams.id, stream.id)))[0]!,
      (row) => row.state === "running",
    );
    expect(running.podName).toBe(roomy.podName);
    // Handed, not queued: the other worker had room.
    expect(running.queuedDestinations).toBeNull();
    expect(roomy.active()).toEqual([stream.id]);
  } finally {
    await roomy.stop();
  }
});
