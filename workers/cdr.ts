/**
 * The cdr worker: folds stored conference events into sessions and daily usage. A job names
 * a room's latest event and folds every event of that room not folded yet (one job per room
 * is pending at a time, see enqueueFold); folding is idempotent, so a job that runs twice (a
 * retry after a crash, a stalled job taken over by another worker) changes nothing the second
 * time. The job is
 * only a doorbell: every USAGE_SWEEP_INTERVAL_MS the worker also sweeps the database for
 * events no fold has marked (their job was lost with Redis) and folds them directly, so
 * usage stays complete while Redis is down and after it lost its data.
 */
import { Worker } from "bullmq";
import { config } from "../src/config";
import { log } from "../src/core/log";
import { every } from "../src/core/periodic";
import { foldRoomOf, sweepUnfolded } from "../src/modules/usage/fold";
import { createRedis } from "../src/queue/connection";
import { type CdrFoldJob, closeWorker, QUEUE_NAMES } from "../src/queue/queues";
import type { Running } from "../src/core/lifecycle";

export interface CdrWorkerOptions {
  concurrency?: number;
  lockDurationMs?: number;
  stalledIntervalMs?: number;
  sweepIntervalMs?: number;
  sweepMinAgeMs?: number;
}

export function startCdrWorker(options: CdrWorkerOptions = {}): Running & { worker: Worker<CdrFoldJob> } {
  const connection = createRedis("cdr-worker");
  const worker = new Worker<CdrFoldJob>(QUEUE_NAMES.cdr, async (job) => foldRoomOf(job.data.eventId), {
    connection,
    prefix: `${config.redis.keyPrefix}:bull`,
    concurrency: options.concurrency ?? config.usage.workerConcurrency,
    ...(options.lockDurationMs && { lockDuration: options.lockDurationMs }),
    ...(options.stalledIntervalMs && { stalledInterval: options.stalledIntervalMs }),
  });
  worker.on("failed", (job, error) => {
    log.warn({ jobId: job?.id, attempt: job?.attemptsMade, err: error.message }, "cdr fold failed");
  });
  // Without a listener an 'error' event (Redis gone) would throw and end the process; the sweep carries on meanwhile.
  worker.on("error", (error) => {
    log.warn({ err: error.message }, "cdr worker: Redis error, folding by sweep until it is back");
  });
  const minAgeMs = options.sweepMinAgeMs ?? config.usage.sweepMinAgeMs;
  const stopSweeping = every(options.sweepIntervalMs ?? config.usage.sweepIntervalMs, "usage sweep", async () => {
    const folded = await sweepUnfolded(minAgeMs);
    if (folded > 0) log.warn({ folded }, "usage sweep folded events whose fold job was lost");
  });
  log.info({ concurrency: worker.opts.concurrency }, "cdr worker started");
  return {
    worker,
    async stop() {
      await stopSweeping();
      // Waits for running folds to finish; a fold cut short by a kill is rolled back and retried.
      await closeWorker(worker, connection);
    },
  };
}
