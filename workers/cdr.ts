/**
 * The cdr worker: folds each stored conference event into sessions and daily usage. A job
 * names one event; folding is idempotent, so a job that runs twice (a retry after a crash,
 * a stalled job taken over by another worker) changes nothing the second time.
 */
import { Worker } from "bullmq";
import { config } from "../src/config";
import { log } from "../src/http/log";
import { foldEventIds } from "../src/modules/usage/fold";
import { createRedis } from "../src/queue/connection";
import { type CdrFoldJob, QUEUE_NAMES } from "../src/queue/queues";
import type { Running } from "../src/server";

export function startCdrWorker(options: { concurrency?: number; lockDurationMs?: number; stalledIntervalMs?: number } = {}): Running & { worker: Worker<CdrFoldJob> } {
  const worker = new Worker<CdrFoldJob>(QUEUE_NAMES.cdr, async (job) => foldEventIds([job.data.eventId]), {
    connection: createRedis("cdr-worker"),
    prefix: `${config.redis.keyPrefix}:bull`,
    concurrency: options.concurrency ?? config.usage.workerConcurrency,
    ...(options.lockDurationMs && { lockDuration: options.lockDurationMs }),
    ...(options.stalledIntervalMs && { stalledInterval: options.stalledIntervalMs }),
  });
  worker.on("failed", (job, error) => {
    log.warn({ jobId: job?.id, attempt: job?.attemptsMade, err: error.message }, "cdr fold failed");
  });
  log.info({ concurrency: worker.opts.concurrency }, "cdr worker started");
  return {
    worker,
    async stop() {
      // Waits for running folds to finish; a fold cut short by a kill is rolled back and retried.
      await worker.close();
    },
  };
}
