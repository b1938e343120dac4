/**
 * A webhooks worker's sending loop on the embedded database, whose one connection cannot
 * hold a transaction open while sending (on PostgreSQL, locked-pump.ts holds one instead of
 * writing leases). It claims due deliveries straight from the database by lease in
 * batches, keeps up to `concurrency` attempts in flight with the next claimed ones waiting
 * beside them, and records the successes that finished meanwhile in one statement while the
 * next attempts go out. A wake-up (the doorbell, the sweep, a retry coming due) only makes it
 * look again: what is due lives in the database alone.
 */
import { config } from "../../core/config";
import { db } from "../../db/client";
import { log } from "../../core/log";
import {
  type Claimed,
  ClaimedBatch,
  claimDue,
  isSuccess,
  leaseMs,
  type Outcome,
  recordFailure,
  recordSuccesses,
  releaseClaims,
  send,
} from "./delivery";
import { SlotShares } from "./shares";
import { EndpointLimits } from "./endpoint-limits";

export interface DeliveryPump {
  /** Something may be due now: claim it if there is room. */
  wake(): void;
  /** Stops claiming, gives back what waits unsent, and waits for the attempts in flight and their records. */
  stop(): Promise<void>;
}

interface Waiting {
  row: Claimed;
  batch: ClaimedBatch;
  /** When its claim was asked for (performance.now()): its lease ends leaseMs() after at the earliest. */
  claimedAt: number;
}

/** Claimed deliveries per attempt in flight, waiting or sent: a claim is a round trip, so each should take many. */
const WINDOW_PER_SLOT = 16;
/**
 * Claims one worker runs at once, each for its share of the window: one alone leaves the attempts idle while it runs.
 */
const CLAIMS_AT_ONCE = 2;

export function startDeliveryPump(concurrency: number): DeliveryPump {
  const window = concurrency * WINDOW_PER_SLOT;
  const share = window / CLAIMS_AT_ONCE;
  // Each endpoint at most its share of the slots while others have work (see SlotShares).
  const waiting = new SlotShares<Waiting>(concurrency);
  let inFlight = 0;
  // Claims under way, and the deliveries they may bring.
  let claims = 0;
  let claimed = 0;
  // Counts wake-ups, so a claim can tell whether one came while it ran.
  let wakes = 0;
  let recording = false;
  let stopped = false;
  // True while something may be due that is not yet claimed; a claim that fills the window leaves it set.
  let more = true;
  // Endpoints whose due rows a short claim left because they were stalled at their share.
  const skipped = new Set<string>();
  const succeeded: Array<{ row: Claimed; outcome: Outcome }> = [];
  const released: Claimed[] = [];

  const fill = () => {
    while (more && !stopped && claims < CLAIMS_AT_ONCE) {
      // A claim asks for a full share of the window, so it starts only once that much is free.
      if (window - (inFlight + waiting.length + claimed) < share) return;
      void claim();
    }
  };

  const claim = async () => {
    claims++;
    claimed += share;
    const wakesBefore = wakes;
    try {
      const claimedAt = performance.now();
      const full = waiting.full();
      const rows = await claimDue(db, share, full);
      const grants = await limits.reserve(share, full);
      // A short claim took all that was due, unless a wake-up came meanwhile; what it left of endpoints at their
      // share is looked for again once one of their attempts ends.
      if (rows.length < share && wakes === wakesBefore) {
        more = false;
        // One whose attempts all ended while the claim ran is woken by none: look again now.
        for (const endpoint of full)
          if (waiting.inFlight(endpoint) > 0) skipped.add(endpoint);
          else more = true;
      }
      rows.push(...(await limits.claim(grants, (count, endpoint) => claimDue(db, count, [], undefined, endpoint))));
      const batch = new ClaimedBatch();
      for (const row of rows) waiting.push({ row, batch, claimedAt });
    } catch (error) {
      more = false;
      log.warn({ err: (error as Error).message }, "claiming webhook deliveries failed; the next sweep tries again");
    } finally {
      claims--;
      claimed -= share;
    }
    startWaiting();
    fill();
  };

  const startWaiting = () => {
    while (!stopped && inFlight < concurrency) {
      const next = waiting.next();
      if (!next) break;
      // Sent now, it might still be in flight when its lease ends and another worker takes it: give it back instead.
      if (performance.now() - next.claimedAt + config.webhooks.timeoutMs + 1_000 > leaseMs()) {
        released.push(next.row);
        waiting.done(next.row);
        limits.done(next.row);
      } else void attempt(next.row, next.batch);
    }
    if (released.length > 0) release();
  };

  const release = () => {
    const rows = released.splice(0);
    // No wake-up: with every slot held by slow receivers, claiming them again at once would only make them wait again.
    releaseClaims(rows).catch((error: Error) =>
      log.warn(
        { err: error.message, deliveries: rows.length },
        "giving back webhook deliveries failed; they go once their lease ends",
      ),
    );
  };

  const record = () => {
    if (recording || succeeded.length === 0) return;
    recording = true;
    const sent = succeeded.splice(0);
    recordSuccesses(sent)
      // Unrecorded, they stay pending and leased: sent again once the lease ends, which at-least-once allows.
      .catch((error: Error) =>
        log.warn({ err: error.message, deliveries: sent.length }, "recording webhook deliveries failed"),
      )
      .finally(() => {
        recording = false;
        // The next event of an ordered endpoint may go now.
        if (sent.some(({ row }) => row.ordered)) wake();
        record();
        fill();
      });
  };

  const attempt = async (row: Claimed, batch: ClaimedBatch) => {
    inFlight++;
    try {
      const outcome = await send(row, batch);
      if (isSuccess(outcome)) {
        succeeded.push({ row, outcome });
        record();
        return;
      }
      if (await recordFailedAttempt(row, outcome, retries)) wake();
    } finally {
      inFlight--;
      waiting.done(row);
      limits.done(row);
      if (skipped.delete(row.endpoint_id)) wake();
      startWaiting();
      fill();
    }
  };

  const wake = () => {
    wakes++;
    more = true;
    fill();
  };
  const retries = retryWaker(wake);
  const limits = new EndpointLimits(wake);

  wake();
  return {
    wake,
    async stop() {
      stopped = true;
      retries.stop();
      limits.stop();
      while (claims > 0) await Bun.sleep(10);
      const unsent = waiting.remove().map(({ row }) => row);
      for (const row of unsent) limits.done(row);
      await releaseClaims(unsent).catch((error: Error) =>
        log.warn({ err: error.message }, "giving back webhook deliveries failed; they go once their lease ends"),
      );
      while (inFlight > 0 || recording || succeeded.length > 0) await Bun.sleep(10);
    },
  };
}

type RetryWaker = ReturnType<typeof retryWaker>;

/**
 * Records a failed attempt and has its retry wake the pump. True when an ordered endpoint's next
 * delivery may go now (this one is not retried). A recording that fails is logged, not thrown:
 * the attempt's lease brings the delivery back.
 */
export async function recordFailedAttempt(row: Claimed, outcome: Outcome, retries: RetryWaker): Promise<boolean> {
  try {
    const { retryInMs } = await recordFailure(row, outcome);
    if (retryInMs !== undefined) retries.wakeIn(retryInMs);
    return retryInMs === undefined && row.ordered;
  } catch (error) {
    log.warn(
      { deliveryId: row.id, err: (error as Error).message },
      "recording a failed webhook attempt failed; it is tried again once its lease ends",
    );
    return false;
  }
}

/** Wakes a pump when the retries it scheduled come due: a timer per second, however many deliveries fall due in it. */
export function retryWaker(wake: () => void): { wakeIn(ms: number): void; stop(): void } {
  const timers = new Map<number, ReturnType<typeof setTimeout>>();
  let stopped = false;
  return {
    wakeIn(ms) {
      const second = Math.ceil((Date.now() + ms) / 1000);
      if (stopped || timers.has(second)) return;
      timers.set(
        second,
        setTimeout(
          () => {
            timers.delete(second);
            wake();
          },
          second * 1000 - Date.now(),
        ),
      );
    },
    stop() {
      stopped = true;
      for (const timer of timers.values()) clearTimeout(timer);
      timers.clear();
    },
  };
}
