/**
 * The outbox: one path from a fact stored in the database to every consumer that acts on it
 * (the cdr fold, webhook delivery, the recorder's room occupancy, the event streams).
 *
 * How it works. A consumer registers by name. A transaction records its facts in the
 * consumer's own work table (conference_events_unfolded, webhook_deliveries, ...) and rings
 * the consumer with the keys the facts concern (a room, an account). Once that transaction
 * has committed, one doorbell rings: in this process at once, and in every other process
 * through publish/subscribe (core/pubsub) on `outbox:<consumer>`. A registered consumer then
 * drains: it claims its work from the database (FOR UPDATE SKIP LOCKED, so processes that
 * heard the same ring take different rows), handles it, and marks it done in the same
 * transaction as its effect. Each consumer has one sweep, a drain of everything due every
 * `sweepEveryMs`, and drains once more whenever publish/subscribe comes back after an outage.
 *
 * Guarantees, and what a crash at each step does:
 *  - At least once per consumer: a fact recorded in a committed transaction is handled, by a
 *    ring or else by the sweep, however many rings are lost. The ring is a doorbell, never
 *    the work: Redis away, a process not yet subscribed, a message dropped only delay the
 *    handling until the next sweep.
 *  - Nothing for a rolled-back transaction: the ring is held until commit, and a rolled-back
 *    fact was never in the work table anyway.
 *  - Crash after commit, before the ring: the fact waits in its table for the sweep.
 *  - Crash mid-drain (a claimed fact handled but its transaction not committed): the claim's
 *    transaction rolls back, its row locks go, and the next drain or sweep claims it again.
 *    A consumer whose effect leaves the database (an HTTP delivery) holds its claim's
 *    transaction open while the effect happens, or claims by a lease written into the row
 *    where it cannot, and may repeat the effect: hence at least once, and every consumer is
 *    idempotent.
 *  - Order per key: a consumer that needs it claims a key's oldest facts first and holds a
 *    lock per key (an advisory transaction lock) while it handles them, so two drains never
 *    handle one key's facts side by side. Facts of different keys have no order.
 *  - In one process one drain of a consumer's rung keys runs at a time: rings that come
 *    meanwhile are gathered and drained together once it ends. `gatherMs` holds a first ring
 *    that long, so a burst of a key's facts is drained by one pass. The sweep runs in a lane
 *    of its own, one at a time, beside that drain (as drains of other processes already run
 *    beside it: the claims and the locks per key keep them apart), so a drain that never ends
 *    cannot stop the sweep, the fallback of every guarantee above.
 */
import type { Running } from "./lifecycle";
import { log } from "./log";
import { every } from "./periodic";
import type { PubSub } from "./pubsub";

export interface OutboxConsumer {
  readonly name: string;
  /**
   * Claims and handles what is due: the facts of the rung keys (empty when the ring named
   * none), or every due fact on "sweep". Answers how many facts it handled.
   */
  drain(due: ReadonlySet<string> | "sweep"): Promise<number>;
  /** How often the sweep looks for what a lost ring left; it is the only fallback. */
  readonly sweepEveryMs: number;
  /** How long a first ring waits for more before its drain starts. */
  readonly gatherMs?: number;
}

/** A registered consumer: `ready` settles once its doorbell across processes is in place (bounded). */
export interface RegisteredConsumer extends Running {
  readonly ready: Promise<void>;
}

export interface Outbox {
  /**
   * Rings `consumer` for `keys` once the transaction `tx` has committed (never if it rolls
   * back; at once outside a transaction). Call it with the transaction handle that recorded
   * the facts. Rings of one transaction go out as one.
   */
  ring(tx: object, consumer: string, keys?: Iterable<string>): void;
  register(consumer: OutboxConsumer): RegisteredConsumer;
}

/** What the outbox is built on, given by the database and queue layers (see src/outbox/outbox.ts). */
export interface OutboxSeams {
  /** Runs `step` once the current transaction commits (never on rollback), or at once outside one. */
  afterCommit(step: () => unknown): void;
  pubsub(): PubSub;
  /** How long a publish may take before it is given up: the sweep covers it. */
  publishWithinMs: number;
}

/** Keys per published message, so one message stays small whatever a transaction rang. */
const KEYS_PER_MESSAGE = 200;

interface Ring {
  from: string;
  keys: string[];
}

export function createOutbox(seams: OutboxSeams): Outbox {
  // Tells this process's own publishes apart: its consumers were rung locally already.
  const origin = crypto.randomUUID();
  const local = new Map<string, Set<(keys: Iterable<string>) => void>>();
  const pending = new WeakMap<object, Map<string, Set<string>>>();

  const publish = async (consumer: string, keys: string[]) => {
    const messages: Ring[] = [];
    for (let start = 0; start === 0 || start < keys.length; start += KEYS_PER_MESSAGE) {
      messages.push({ from: origin, keys: keys.slice(start, start + KEYS_PER_MESSAGE) });
    }
    const channel = `outbox:${consumer}`;
    const bus = seams.pubsub();
    const withinMs = seams.publishWithinMs;
    const sent = messages.map((message) => bus.publish(channel, JSON.stringify(message), { withinMs }));
    await Promise.all(sent).catch((error: Error) =>
      log.warn({ consumer, err: error.message }, "outbox ring not published: the consumer's sweep finds the work"),
    );
  };

  const ringNow = (consumer: string, keys: Set<string>) => {
    for (const rung of local.get(consumer) ?? []) rung(keys);
    void publish(consumer, [...keys]);
  };

  return {
    ring(tx, consumer, keys = []) {
      let rung = pending.get(tx);
      if (!rung) {
        rung = new Map();
        pending.set(tx, rung);
        const toRing = rung;
        seams.afterCommit(() => {
          pending.delete(tx);
          for (const [name, rungKeys] of toRing) ringNow(name, rungKeys);
        });
      }
      const set = rung.get(consumer) ?? new Set();
      rung.set(consumer, set);
      for (const key of keys) set.add(key);
    },

    register(consumer) {
      let stopped = false;
      const keys = new Set<string>();
      let rungBare = false;
      let sweepAsked = false;
      let gathering: ReturnType<typeof setTimeout> | undefined;
      // Two lanes: the rung keys' drains, and beside them the sweeps, so a drain that never ends
      // (on a connection that died under it, say) cannot hold back the backstop.
      let draining: Promise<void> | undefined;
      let sweeping: Promise<void> | undefined;
      const sweepsDone: Array<() => void> = [];

      const attempt = async (due: ReadonlySet<string> | "sweep") => {
        try {
          await consumer.drain(due);
        } catch (error) {
          const err = (error as Error).message;
          log.warn({ consumer: consumer.name, err }, "outbox drain failed; the sweep tries again");
        }
      };

      const rungPending = () => keys.size > 0 || rungBare;
      const drainRung = () => {
        if (draining || stopped) return;
        draining = (async () => {
          while (!stopped && rungPending()) {
            const due = new Set(keys);
            keys.clear();
            rungBare = false;
            await attempt(due);
          }
        })().finally(() => {
          draining = undefined;
          // Rung after the loop's last look.
          if (!stopped && rungPending()) drainRung();
        });
      };

      const runSweeps = () => {
        if (sweeping || stopped) return;
        sweeping = (async () => {
          while (!stopped && sweepAsked) {
            // Rung keys stay: a sweep may leave the youngest facts to their ring.
            sweepAsked = false;
            const done = sweepsDone.splice(0);
            await attempt("sweep");
            for (const resolve of done) resolve();
          }
        })().finally(() => {
          sweeping = undefined;
          // A sweep asked for after the loop's last look, or while stopping, must not wait for ever.
          if (stopped) for (const resolve of sweepsDone.splice(0)) resolve();
          else if (sweepAsked) runSweeps();
        });
      };

      const rung = (rungKeys: Iterable<string>) => {
        if (stopped) return;
        let any = false;
        for (const key of rungKeys) {
          keys.add(key);
          any = true;
        }
        if (!any) rungBare = true;
        if (draining || gathering) return;
        if (!consumer.gatherMs) return drainRung();
        gathering = setTimeout(() => {
          gathering = undefined;
          drainRung();
        }, consumer.gatherMs);
      };

      const sweep = () =>
        new Promise<void>((resolve) => {
          if (stopped) return resolve();
          sweepsDone.push(resolve);
          sweepAsked = true;
          runSweeps();
        });

      const handlers = local.get(consumer.name) ?? new Set();
      local.set(consumer.name, handlers);
      handlers.add(rung);
      const subscription = seams.pubsub().subscribe(
        `outbox-${consumer.name}`,
        [`outbox:${consumer.name}`],
        (_channel, message) => {
          let ring: Ring;
          try {
            ring = JSON.parse(message) as Ring;
          } catch {
            return;
          }
          if (ring.from !== origin) rung(ring.keys);
        },
        // Rings published while the bus was away were lost: look for everything.
        { onRestored: () => void sweep() },
      );
      const stopSweeping = every(consumer.sweepEveryMs, `${consumer.name} sweep`, sweep);
      return {
        ready: subscription.settle(seams.publishWithinMs),
        async stop() {
          stopped = true;
          clearTimeout(gathering);
          handlers.delete(rung);
          await stopSweeping();
          await Promise.all([draining, sweeping]);
          await subscription.close();
        },
      };
    },
  };
}
