/**
 * The webhooks worker: claims due deliveries straight from the database and sends them. Redis
 * only rings the doorbell (a wake-up when deliveries were queued), so a worker that misses
 * it loses nothing: every WEBHOOK_SWEEP_INTERVAL_MS it looks again for what is due (a
 * doorbell missed while Redis was away, a worker killed mid-attempt whose lease ended), and a
 * retry wakes the worker that scheduled it. Every hour it purges events older than
 * EVENT_RETENTION_DAYS.
 */
import { config } from "../src/config";
import { log } from "../src/core/log";
import { DOORBELL_CHANNEL, dueDeliveries } from "../src/modules/webhooks/outbox";
import { startDeliveryPump } from "../src/modules/webhooks/pump";
import { purgeOldEvents } from "../src/modules/webhooks/service";
import { PROMPT_REDIS_MS } from "../src/queue/connection";
import { pubsub } from "../src/queue/redis-pubsub";
import type { Running } from "../src/core/lifecycle";
import { every } from "../src/core/periodic";

const PURGE_INTERVAL_MS = 3_600_000;

export interface WebhooksWorkerOptions {
  concurrency?: number;
  sweepIntervalMs?: number;
}

export function startWebhooksWorker(options: WebhooksWorkerOptions = {}): Running & { ready: Promise<void> } {
  const concurrency = options.concurrency ?? config.webhooks.workerConcurrency;
  const pump = startDeliveryPump(concurrency);
  const wake = () => pump.wake();
  dueDeliveries.on("due", wake);
  // Back after an outage: what was queued meanwhile rang no bell here. A subscription that
  // fails (Redis away) is made again once Redis is back; the sweep covers the gap.
  const doorbell = pubsub().subscribe("webhooks-doorbell", [DOORBELL_CHANNEL], wake, { onRestored: wake });
  const stopSweeping = every(options.sweepIntervalMs ?? config.webhooks.sweepIntervalMs, "webhooks sweep", async () => wake());
  const stopPurging = every(PURGE_INTERVAL_MS, "event purge", async () => {
    const purged = await purgeOldEvents();
    if (purged > 0) log.info({ purged, retentionDays: config.webhooks.eventRetentionDays }, "purged old events");
  });
  log.info({ concurrency }, "webhooks worker started");
  return {
    ready: doorbell.settle(PROMPT_REDIS_MS),
    async stop() {
      dueDeliveries.off("due", wake);
      await stopSweeping();
      await stopPurging();
      // Waits for the attempts in flight (each bounded by WEBHOOK_TIMEOUT_MS); one cut short is sent again once its lease ends.
      await pump.stop();
      await doorbell.close();
    },
  };
}
