/**
 * The webhooks worker: sends each delivery its job names, if the database still says it is
 * due. The job is only a doorbell: every WEBHOOK_SWEEP_INTERVAL_MS the worker also queues
 * every due delivery no job is sending (lost with Redis, or its worker killed mid-attempt),
 * and while Redis is away it sends them itself. Every hour it purges events older than
 * EVENT_RETENTION_DAYS.
 */
import { Worker } from "bullmq";
import { config } from "../src/config";
import { log } from "../src/core/log";
import { attemptDeliveries, sweepDueDeliveries } from "../src/modules/webhooks/delivery";
import { DELIVERY_BATCH } from "../src/modules/webhooks/outbox";
import { purgeOldEvents } from "../src/modules/webhooks/service";
import { createRedis, redis } from "../src/queue/connection";
import { closeWorker, QUEUE_NAMES, type WebhookDeliverJob } from "../src/queue/queues";
import type { Running } from "../src/core/lifecycle";
import { every } from "../src/core/periodic";

const PURGE_INTERVAL_MS = 3_600_000;

export interface WebhooksWorkerOptions {
  concurrency?: number;
  lockDurationMs?: number;
  stalledIntervalMs?: number;
  sweepIntervalMs?: number;
}

export function startWebhooksWorker(options: WebhooksWorkerOptions = {}): Running & { worker: Worker<WebhookDeliverJob> } {
  const connection = createRedis("webhooks-worker");
  const worker = new Worker<WebhookDeliverJob>(QUEUE_NAMES.webhooks, async (job) => attemptDeliveries(job.data.deliveryIds), {
    connection,
    prefix: `${config.redis.keyPrefix}:bull`,
    concurrency: options.concurrency ?? config.webhooks.workerConcurrency,
    ...(options.lockDurationMs && { lockDuration: options.lockDurationMs }),
    ...(options.stalledIntervalMs && { stalledInterval: options.stalledIntervalMs }),
  });
  worker.on("failed", (job, error) => log.warn({ jobId: job?.id, err: error.message }, "webhook delivery job failed; the sweep queues it again"));
  // Without a listener an 'error' event (Redis gone) would end the process; the sweep sends meanwhile.
  worker.on("error", (error) => log.warn({ err: error.message }, "webhooks worker: Redis error, sending by sweep until it is back"));
  const stopSweeping = every(options.sweepIntervalMs ?? config.webhooks.sweepIntervalMs, "webhooks sweep", async () => {
    if (redis().status === "ready") await sweepDueDeliveries();
    else
      await sweepDueDeliveries(100, async (due) => {
        for (let i = 0; i < due.length; i += DELIVERY_BATCH) await attemptDeliveries(due.slice(i, i + DELIVERY_BATCH).map((delivery) => delivery.id));
      });
  });
  const stopPurging = every(PURGE_INTERVAL_MS, "event purge", async () => {
    const purged = await purgeOldEvents();
    if (purged > 0) log.info({ purged, retentionDays: config.webhooks.eventRetentionDays }, "purged old events");
  });
  log.info({ concurrency: worker.opts.concurrency }, "webhooks worker started");
  return {
    worker,
    async stop() {
      await stopSweeping();
      await stopPurging();
      // Waits for attempts in flight (unless Redis is gone); one cut short is sent again once its lease ends.
      await closeWorker(worker, connection);
    },
  };
}
