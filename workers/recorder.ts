/**
 * The recorder worker: takes start and stop jobs from the BullMQ `recorder` queue and runs
 * up to STREAMING_CAPACITY recorders at once. More workers on more machines scale it out.
 *
 * - A start job launches a recorder and completes once it publishes; the stream then lives
 *   in this process (its row names this pod) until stopped, emptied or failed.
 * - A stop job may land on any worker: the owner stops its recorder itself; any other
 *   worker relays the stop to the owner over Redis, or, when the owner is gone, finishes the
 *   stream on its behalf.
 * - The outbox's "occupancy" consumer looks at a room's stored participant events whenever
 *   they change; a stream stops once its room has stayed empty for the reconnect window.
 * - Reconciliation fails streams whose worker stopped heart-beating and kills their
 *   recorder if it runs on this machine.
 */
import { mkdirSync } from "node:fs";
import { hostname } from "node:os";
import { type Job, Worker } from "bullmq";
import { config } from "../src/core/config";
import type { Running } from "../src/core/lifecycle";
import { log } from "../src/core/log";
import type { RedisClient } from "../src/queue/connection";
import type { Outbox } from "../src/core/outbox";
import type { PubSub } from "../src/core/pubsub";
import { outbox } from "../src/outbox/outbox";
import { pubsub } from "../src/queue/redis-pubsub";
import {
  closeWorker,
  QUEUE_NAMES,
  queueOptions,
  RECORDER_JOBS,
  type RecorderStartJob,
  type RecorderStopJob,
} from "../src/queue/queues";
import type { RecorderDriver } from "./recorder/driver";
import { reportRoom, startHeartbeat } from "./recorder/heartbeat";
import { driverFromConfig } from "./recorder/index";
import { stopStateSubscriber } from "../src/modules/streaming";
import {
  handedStart,
  podCommands,
  podHandOffs,
  reconcile,
  relayedStop,
  roomOf,
  startJob,
  stopJob,
  takeQueued,
} from "./recorder/jobs";
import { type RecorderHost, stopLocal } from "./recorder/local";
import { occupancyConsumer } from "./recorder/occupancy";

export interface RecorderWorker extends Running {
  podName: string;
  /** Streams this worker runs right now. */
  active(): string[];
}

/** What a recorder worker stands on: its process's, as the root built them, unless a test gives others. */
export interface RecorderServices {
  pubsub: PubSub;
  outbox: Outbox;
}

export async function startRecorderWorker(
  driver: RecorderDriver = driverFromConfig(),
  services: RecorderServices = { pubsub: pubsub(), outbox },
): Promise<RecorderWorker> {
  let draining = false;
  const worker: RecorderHost = {
    pod: config.streaming.podName,
    host: hostname(),
    driver,
    pubsub: services.pubsub,
    local: new Map(),
    reserved: 0,
    reservedUnits: 0,
    roomFreed: () => {
      // A worker shutting down frees its room for the others, not for itself.
      if (draining) return;
      // Told at once, not at the next beat: until then the others read the room it had, full
      // perhaps, and a full worker queues a start this one has room for.
      void reportRoom(worker.pod, roomOf(worker));
      takeQueued(worker).catch((error: Error) => log.warn({ err: error.message }, "queued streams not taken"));
    },
    closing: false,
  };
  const { pod } = worker;
  mkdirSync(config.streaming.recordingDir, { recursive: true });
  const heartbeat = await startHeartbeat(pod, worker.host, () => roomOf(worker));

  const handOffs = podHandOffs(pod);
  const subscription = services.pubsub.subscribe(
    "recorder-commands",
    [podCommands(pod), handOffs],
    (channel, message) => {
      const handled = channel === handOffs ? handedStart(worker, message) : relayedStop(worker, message);
      handled.catch((error: Error) => log.error({ err: error.message }, "recorder message failed"));
    },
  );
  await subscription.ready;
  const occupancy = services.outbox.register(occupancyConsumer(worker));
  await occupancy.ready;

  const workerOptions = queueOptions();
  const jobs = new Worker(
    QUEUE_NAMES.recorder,
    async (job: Job, token?: string) => {
      if (job.name === RECORDER_JOBS.start) return startJob(worker, job as Job<RecorderStartJob>, token);
      if (job.name === RECORDER_JOBS.stop) return stopJob(worker, job as Job<RecorderStopJob>);
      throw new Error(`unknown recorder job ${job.name}`);
    },
    // Jobs, not streams: a start job ends once its recorder publishes, and a relayed stop
    // may wait on another worker, so a few run side by side; STREAMING_CAPACITY bounds streams.
    // An idle worker blocks on the queue's marker for drainDelay seconds and then asks again: a
    // job added meanwhile wakes it at once and a delayed one when it falls due, whatever the delay,
    // so the wait only sets how often idle asks go out. 10 s is the longest BullMQ blocks on Redis.
    { ...workerOptions, concurrency: 8, drainDelay: 10 },
  );
  jobs.on("failed", (job, error) => log.warn({ job: job?.name, err: error.message }, "recorder job failed"));
  jobs.on("error", (error) => log.error({ err: error.message }, "recorder worker error"));

  // One at a time, and the stop waits for the one under way: it reads the database, which closes after the stop.
  let reconciling: Promise<void> | undefined;
  const reconcileNow = () =>
    (reconciling ??= reconcile(worker, heartbeat)
      .catch((error: Error) => log.error({ err: error.message }, "reconciliation failed"))
      .finally(() => {
        reconciling = undefined;
      }));
  await reconcileNow();
  // A worker that comes with room takes the first queued streams itself, as one whose stream ends
  // does: their jobs, handed back every 0.5 s, kept reaching the full worker that handed them back,
  // and reached this one after anything from one to more than ten seconds.
  worker.roomFreed();
  // As often as a worker may go silent before it counts as lost: a lost worker's streams end
  // within twice that of its last beat.
  const reconciler = setInterval(() => void reconcileNow(), config.streaming.lostAfterMs);
  log.info(
    { pod, driver: driver.name, capacity: config.streaming.capacity, units: config.streaming.workerUnits },
    "recorder worker ready",
  );

  return {
    podName: pod,
    active: () => [...worker.local.keys()],
    async stop() {
      draining = true;
      clearInterval(reconciler);
      await reconciling;
      await occupancy.stop();
      await closeWorker(jobs, workerOptions.connection as RedisClient);
      // Shutting down ends this worker's streams cleanly, recordings kept, rather than orphaning them.
      await Promise.all(
        [...worker.local.values()].map((entry) => stopLocal(worker, entry, "stopped", "recorder_shutdown")),
      );
      worker.closing = true;
      await heartbeat.stop();
      // Its relayed stops waited on the stream states' outbox consumer (registered at the first wait).
      await Promise.all([subscription.close(), stopStateSubscriber()]);
    },
  };
}
