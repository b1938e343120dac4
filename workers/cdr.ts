/**
 * The cdr worker: the outbox's "cdr" consumer (core/outbox). It folds stored conference events
 * into sessions and daily usage. A ring names rooms with new events (gathered for FOLD_GATHER_MS,
 * so a burst of a room's events is folded by one pass), and the worker folds every event of
 * each rung room not folded yet, up to `concurrency` rooms at once. Folding is idempotent and
 * claims with SKIP LOCKED, so the workers of several processes that hear one ring take
 * different events, and a fold cut short by a crash is rolled back and taken again. The ring is
 * only a doorbell: every USAGE_SWEEP_INTERVAL_MS the consumer's sweep folds the events no fold
 * has taken (their ring was lost with Redis), so usage stays complete while Redis is down.
 */
import { config } from "../src/core/config";
import type { Outbox } from "../src/core/outbox";
import { log } from "../src/core/log";
import { FOLD_CONSUMER, roomOfRingKey } from "../src/modules/conference-log";
import { foldRoom, sweepUnfolded } from "../src/modules/usage";
import { outbox as processOutbox } from "../src/outbox/outbox";
import type { Running } from "../src/core/lifecycle";

/** A ring's first room waits this long for more of the burst before the fold starts. */
const FOLD_GATHER_MS = 250;

export interface CdrWorkerOptions {
  concurrency?: number;
  sweepIntervalMs?: number;
  sweepMinAgeMs?: number;
  /** The process's outbox unless given (a test runs workers of several processes in one). */
  outbox?: Outbox;
}

export function startCdrWorker(options: CdrWorkerOptions = {}): Running & { ready: Promise<void> } {
  const concurrency = options.concurrency ?? config.usage.workerConcurrency;
  const minAgeMs = options.sweepMinAgeMs ?? config.usage.sweepMinAgeMs;
  const consumer = (options.outbox ?? processOutbox).register({
    name: FOLD_CONSUMER,
    sweepEveryMs: options.sweepIntervalMs ?? config.usage.sweepIntervalMs,
    gatherMs: FOLD_GATHER_MS,
    async drain(due) {
      if (due === "sweep") {
        const folded = await sweepUnfolded(minAgeMs);
        if (folded > 0) log.warn({ folded }, "usage sweep folded events whose ring was lost");
        return folded;
      }
      const rooms = [...due].values();
      let folded = 0;
      // After a failed fold the rest of the rung rooms are left to the sweep: while
      // the database is away each fold would wait out a connection attempt.
      let failed = false;
      const folder = async () => {
        for (const key of rooms) {
          if (failed) return;
          try {
            folded += await foldRoom(roomOfRingKey(key));
          } catch (error) {
            failed = true;
            const err = (error as Error).message;
            log.warn({ room: key, err }, "cdr fold failed; the usage sweep folds this and the other rung rooms");
          }
        }
      };
      await Promise.all(Array.from({ length: Math.min(concurrency, due.size) }, folder));
      return folded;
    },
  });
  log.info({ concurrency }, "cdr worker started");
  return {
    ready: consumer.ready,
    // Waits for the folds in flight; one cut short by a kill is rolled back and folded again.
    stop: () => consumer.stop(),
  };
}
