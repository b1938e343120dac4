/**
 * The webhooks worker: the outbox's "webhooks" consumer (core/outbox). It claims due
 * deliveries straight from the database's due set and sends them (on PostgreSQL under a
 * transaction that deletes their due rows and stays open while the batch is sent, on the
 * embedded database under leases); a ring (deliveries were queued) only wakes its pump, so a worker that
 * misses one loses nothing: the consumer's sweep, every WEBHOOK_SWEEP_INTERVAL_MS, looks
 * again for what is due (a ring missed while Redis was away, a worker killed mid-attempt
 * whose claim ended), and a retry wakes the worker that scheduled it. Every hour it purges
 * events older than EVENT_RETENTION_DAYS.
 *
 * It is part of the webhooks module, not of workers/: what it runs (the pumps, the circuits'
 * probe, the heads) is the module's own, while the module's index serves the admin API and the
 * console, TypeBox models included, which a delivery process does not load (docs/testing.md).
 */
import { config } from "../../core/config";
import { log } from "../../core/log";
import { purgeOldEvents, WEBHOOKS_CONSUMER } from "../catalogue";
import { startDeliveryPump } from "./pump";
import { startLockedPump } from "./locked-pump";
import { database, db } from "../../db/client";
import { promoteHeads } from "./service";
import { probeOpenCircuits } from "./probe";
import type { Outbox } from "../../core/outbox";
import { outbox as processOutbox } from "../../outbox/outbox";
import type { Running } from "../../core/lifecycle";
import { every } from "../../core/periodic";

const PURGE_INTERVAL_MS = 3_600_000;

export interface WebhooksWorkerOptions {
  concurrency?: number;
  sweepIntervalMs?: number;
  /** The process's outbox unless given (a test runs workers of several processes in one). */
  outbox?: Outbox;
}

export function startWebhooksWorker(options: WebhooksWorkerOptions = {}): Running & { ready: Promise<void> } {
  const concurrency = options.concurrency ?? config.webhooks.workerConcurrency;
  // The embedded database has one connection: a transaction held open while sending would stop every other
  // query.
  const pump = database.kind === "postgres" ? startLockedPump(concurrency) : startDeliveryPump(concurrency);
  // Rings name no deliveries: the pump claims whatever is due, the sweep's look included.
  const consumer = (options.outbox ?? processOutbox).register({
    name: WEBHOOKS_CONSUMER,
    sweepEveryMs: options.sweepIntervalMs ?? config.webhooks.sweepIntervalMs,
    async drain(due) {
      // What a head left set aside while it was being recorded (see promoteHeads).
      if (due === "sweep") {
        await promoteHeads(db, "all");
        // Breakers whose cool-down is over: one probe each; what a closed one held back is claimed next.
        await probeOpenCircuits().catch((error: Error) =>
          log.warn({ err: error.message }, "probing webhook endpoints' circuit breakers failed; the next sweep will"),
        );
      }
      pump.wake();
      return 0;
    },
  });
  const stopPurging = every(PURGE_INTERVAL_MS, "event purge", async () => {
    const purged = await purgeOldEvents();
    if (purged > 0) log.info({ purged, retentionDays: config.webhooks.eventRetentionDays }, "purged old events");
  });
  log.info({ concurrency }, "webhooks worker started");
  return {
    ready: consumer.ready,
    async stop() {
      await consumer.stop();
      await stopPurging();
      // Waits for the attempts in flight (each bounded by WEBHOOK_TIMEOUT_MS) and their
      // records; one cut short is sent again once its claim ends.
      await pump.stop();
    },
  };
}
