/**
 * A webhooks worker's sending loop on PostgreSQL. It claims due deliveries in batches, each
 * in a transaction left open on its own connection while the batch is sent: the claim is
 * the transaction's delete of their rows in the due set, and other workers skip those rows
 * until the transaction ends. The outcomes are recorded in one statement and commit with the
 * claim, so a success costs that delete and its log row's HOT update, where a lease costs
 * two writes of the log row and its index entries (the claim, then the outcome); the
 * endpoints' failure runs follow the commit, and only when an attempt failed or a failing
 * endpoint answered.
 * A worker or connection that dies ends its transaction: the delete is undone, so the
 * deliveries are due again at once and sent again, which at-least-once allows.
 *
 * A batch's transaction is bounded: HOLD_MS after its claim, the deliveries it has not begun
 * are given back to the due set as they were, the attempts still in flight are leased (due again once the lease
 * ends, as the embedded database's pump leases every claim) and the finished ones committed, so one slow receiver
 * holds back neither the other outcomes nor the rows' locks. Those attempts are recorded
 * as they end. Several batches are open at once, so the attempts of the next go out while
 * one waits for its last answers and commits.
 */
import { config } from "../../core/config";
import { db, outsideTransaction } from "../../db/client";
import { log } from "../../core/log";
import {
  type Attempted,
  type Claimed,
  ClaimedBatch,
  claimLocked,
  isSuccess,
  type Outcome,
  promoteNext,
  recordEndpoints,
  recordLocked,
  recordSuccesses,
  type ScanPosition,
  send,
} from "./delivery";
import { type DeliveryPump, recordFailedAttempt, retryWaker } from "./pump";
import { SlotShares, STALLED_MS } from "./shares";
import { EndpointLimits } from "./endpoint-limits";

/**
 * Deliveries a batch claims per attempt in flight: its transaction, claim and record are round trips, so each should
 * take many (32, not 16: a worker 6-9 % faster in the webhooks benchmark, PostgreSQL's CPU a delivery 5 % less).
 */
export const BATCH_PER_SLOT = 32;
/**
 * Batches claiming or sending at once: one claims while the others' attempts keep every slot
 * busy. Batches that wait for their commit do not count: under load a record and its commit
 * take longer than a batch takes to send, and claims must not wait for them.
 */
const SENDING_AT_ONCE = 3;
/** How long a batch's transaction waits for its attempts before it commits and leases the ones still in flight. */
const HOLD_MS = 1_000;

class Batch {
  readonly shared = new ClaimedBatch();
  readonly finished: Attempted[] = [];
  /** Attempts under way, with when each began. */
  readonly inFlight = new Map<Claimed, number>();
  unsent = 0;
  /** Its rows not begun, by endpoint. */
  readonly unsentAt = new Map<string, number>();
  /** Set while a claim waits for its place: it commits once it sends nothing more (see blockedIn). */
  blockedTimer: ReturnType<typeof setTimeout> | undefined;
  /** When it was claimed or one of its attempts last began or ended (performance.now()). */
  movedAt = performance.now();
  /** Set once the batch records what it has: an attempt that ends later is recorded on its own. */
  cut = false;
  private release!: () => void;
  readonly settled = new Promise<void>((resolve) => {
    this.release = resolve;
  });

  private close!: () => void;
  /** Resolved once its transaction has ended, committed or not. */
  readonly ended = new Promise<void>((resolve) => {
    this.close = resolve;
  });

  settle() {
    this.cut = true;
    this.release();
  }

  end() {
    this.close();
  }
}

/** `holdMs`: how long a batch's transaction may wait for its attempts (a test holds one open). */
export function startLockedPump(concurrency: number, holdMs = HOLD_MS): DeliveryPump {
  const size = concurrency * BATCH_PER_SLOT;
  // Each open transaction holds a connection of the process's pool: half of the role's share of it
  // (DATABASE_POOL_SIZE) at most, the rest for everything else.
  const transactionsAtOnce = Math.max(1, Math.floor(config.database.poolSize / 2));
  // Each endpoint at most its share of the slots while others have work (see SlotShares).
  const waiting = new SlotShares<{ row: Claimed; batch: Batch }>(concurrency);
  const open = new Set<Batch>();
  let claiming = 0;
  let inFlight = 0;
  let wakes = 0;
  let stopped = false;
  // True while something may be due that is not yet claimed; a full claim leaves it set.
  let more = true;
  // Endpoints whose due rows a short claim left because they were stalled at their share.
  const skipped = new Set<string>();
  // Where the next claim goes on from in the due set (see ScanPosition).
  const position: ScanPosition = {};
  // Successes of attempts that outlived their batch's transaction, recorded together; failures recorded one by one.
  const late: Array<{ row: Claimed; outcome: Outcome }> = [];
  let recordingLate = false;
  let recordingFailures = 0;
  // Attempts that outlived their batch, waiting for its transaction to end before they are recorded.
  let awaitingBatch = 0;

  // Batches that may still start an attempt. While others have work, not one whose rows are all begun, nor one
  // whose rows left are all of endpoints at their share: it starts nothing until one of those attempts ends, which
  // for a silent receiver is WEBHOOK_TIMEOUT_MS, and meanwhile the claims for the other endpoints' new work go on
  // (a silent receiver's first attempts held three such batches, and the others' deliveries waited 20-40 ms for
  // them to commit). An endpoint alone is at its share whenever the slots are busy: every open batch counts.
  const sending = () => {
    const alone = waiting.alone();
    let count = 0;
    for (const batch of open)
      if (!batch.cut && (alone || (batch.unsent > 0 && waiting.stalledIn(batch.unsentAt.keys()) === undefined)))
        count++;
    return count;
  };
  // A claim starts while less than a batch waits unsent, so the next rows are there before the slots run dry.
  const fill = () => {
    while (more && !stopped && waiting.length < size) {
      if (claiming + sending() >= SENDING_AT_ONCE || claiming + open.size >= transactionsAtOnce) return makeRoom();
      void runBatch();
    }
  };

  // How long until a batch counts as sending nothing more for now (0: it does), undefined while it may start an
  // attempt: none of its attempts began or ended for STALLED_MS (a healthy receiver answers sooner), and its rows
  // are all begun or those left are of endpoints stalled at their share (a silent receiver's backlog). A healthy
  // receiver's batch is never so: its answers come one after another, though its endpoint, alone, holds every slot.
  const blockedIn = (batch: Batch) => {
    if (batch.cut) return undefined;
    const stalled = batch.unsent === 0 ? 0 : waiting.stalledIn(batch.unsentAt.keys());
    if (stalled === undefined) return undefined;
    return Math.max(0, stalled, STALLED_MS - (performance.now() - batch.movedAt));
  };
  // A claim is wanted but the open batches hold its place: one that sends nothing more commits once it is so, its
  // attempts leased and recorded as they end (as after HOLD_MS) and its backlog given back, which the claims leave
  // while its endpoint is stalled. A silent receiver's attempts then keep neither the connections nor the places of
  // the claims that bring the other endpoints' deliveries.
  const makeRoom = () => {
    for (const batch of open) awaitBlocked(batch);
  };
  const awaitBlocked = (batch: Batch) => {
    if (batch.blockedTimer !== undefined) return;
    const wait = blockedIn(batch);
    if (wait === undefined) return;
    batch.blockedTimer = setTimeout(() => {
      batch.blockedTimer = undefined;
      if (!more) return;
      if (blockedIn(batch) === 0) cut(batch);
      // Still sending, or not yet quiet long enough: a silent receiver's batch has no attempt end to look again.
      else awaitBlocked(batch);
    }, wait);
  };

  const cut = (batch: Batch) => {
    if (batch.cut) return;
    // What it has not begun is given back when the batch records: due again once the transaction ends.
    waiting.remove((entry) => entry.batch === batch);
    batch.unsent = 0;
    batch.unsentAt.clear();
    batch.settle();
  };

  const runBatch = async () => {
    claiming++;
    const wakesBefore = wakes;
    const batch = new Batch();
    let claimed = false;
    let gaveBack = false;
    try {
      const full = waiting.full();
      const grants = await limits.reserve(size, full);
      const recorded = await db.transaction(async (tx) => {
        const rows = await claimLocked(tx, size, full, undefined, position);
        claiming--;
        claimed = true;
        // A short claim took all that was due, unless a wake-up came meanwhile; what it left of endpoints at their
        // share is looked for again once one of their attempts ends.
        if (rows.length < size && wakes === wakesBefore) {
          more = false;
          // One whose attempts all ended while the claim ran is woken by none: look again now.
          for (const endpoint of full)
            if (waiting.inFlight(endpoint) > 0) skipped.add(endpoint);
            else more = true;
        }
        rows.push(...(await limits.claim(grants, (count, endpoint) => claimLocked(tx, count, [], endpoint))));
        if (rows.length === 0) return undefined;
        if (stopped) {
          // Claimed as the worker stops: given back, due again once the transaction commits.
          await recordLocked(tx, [], [], rows);
          for (const row of rows) outsideTransaction(() => limits.done(row));
          return undefined;
        }
        open.add(batch);
        batch.unsent = rows.length;
        for (const row of rows) {
          waiting.push({ row, batch });
          batch.unsentAt.set(row.endpoint_id, (batch.unsentAt.get(row.endpoint_id) ?? 0) + 1);
        }
        const timer = setTimeout(() => cut(batch), holdMs);
        // The attempts and the next batch use connections of their own: this transaction waits for them,
        // never they for it.
        outsideTransaction(() => {
          startWaiting();
          fill();
        });
        await batch.settled;
        clearTimeout(timer);
        clearTimeout(batch.blockedTimer);
        const begun = new Set([...batch.finished.map(({ row }) => row), ...batch.inFlight.keys()]);
        const unbegun = rows.filter((row) => !begun.has(row));
        await recordLocked(
          tx,
          batch.finished,
          [...batch.inFlight].map(([row, at]) => ({ row, at })),
          unbegun,
        );
        for (const row of unbegun) outsideTransaction(() => limits.done(row));
        gaveBack = unbegun.length > 0;
        return true;
      });
      if (recorded) {
        await settleEndpoints(batch.finished);
        // The next event of an ordered endpoint may go now, and what the batch gave back is due. A wake-up, once the
        // next is brought forward: a claim that began before finds nothing, and must not end the run of claims.
        if (gaveBack || batch.finished.some(({ row }) => row.ordered)) wake();
      }
    } catch (error) {
      cut(batch);
      log.warn(
        { err: (error as Error).message, deliveries: batch.finished.length },
        "a batch of webhook deliveries was not recorded; they are due again",
      );
      // Its successes are recorded on their own, as an attempt that outlives its batch is: whether the
      // connection's loss was noticed before or after they ended, a sent delivery is not sent again.
      for (const { row, outcome } of batch.finished) if (isSuccess(outcome)) late.push({ row, outcome });
      recordLate();
      more = false;
    } finally {
      if (!claimed) claiming--;
      batch.end();
      open.delete(batch);
      startWaiting();
      fill();
    }
  };

  const settleEndpoints = async (finished: Attempted[]) => {
    try {
      // After the commit: a head deleted by the batch's claim is still due to every other transaction until then.
      await promoteNext(finished.map(({ row }) => row));
    } catch (error) {
      log.warn({ err: (error as Error).message }, "bringing forward ordered webhook deliveries failed; the sweep will");
    }
    try {
      const endpoints = await recordEndpoints(finished);
      for (const endpoint of endpoints.disabled)
        log.warn({ endpointId: endpoint.id, reason: endpoint.disabled_reason }, "webhook endpoint disabled");
      for (const ms of endpoints.retryInMs) retries.wakeIn(ms);
    } catch (error) {
      // The deliveries are recorded; their retries come due for the sweep, the next outcome tells the endpoint.
      log.warn({ err: (error as Error).message }, "recording webhook endpoints' failure runs failed");
    }
  };

  const startWaiting = () => {
    while (!stopped && inFlight < concurrency) {
      const next = waiting.next();
      if (!next) return;
      void attempt(next.row, next.batch);
    }
  };

  const recordLate = () => {
    if (recordingLate || late.length === 0) return;
    recordingLate = true;
    const sent = late.splice(0);
    recordSuccesses(sent)
      // Unrecorded, they stay pending and leased: sent again once the lease ends, which at-least-once allows.
      .catch((error: Error) =>
        log.warn({ err: error.message, deliveries: sent.length }, "recording webhook deliveries failed"),
      )
      .finally(() => {
        recordingLate = false;
        // The next event of an ordered endpoint may go now.
        if (sent.some(({ row }) => row.ordered)) wake();
        recordLate();
        fill();
      });
  };

  const attempt = async (row: Claimed, batch: Batch) => {
    inFlight++;
    batch.unsent--;
    const left = batch.unsentAt.get(row.endpoint_id)! - 1;
    if (left > 0) batch.unsentAt.set(row.endpoint_id, left);
    else batch.unsentAt.delete(row.endpoint_id);
    batch.inFlight.set(row, Date.now());
    batch.movedAt = performance.now();
    const outcome = await send(row, batch.shared);
    const ended = performance.now();
    batch.movedAt = ended;
    inFlight--;
    waiting.done(row, ended);
    limits.done(row);
    if (skipped.delete(row.endpoint_id)) wake();
    if (!batch.cut) {
      batch.finished.push({ row, outcome, at: batch.inFlight.get(row)! });
      batch.inFlight.delete(row);
      if (batch.unsent === 0 && batch.inFlight.size === 0) batch.settle();
    } else {
      awaitingBatch++;
      // Its lease is written by its batch's record: recorded before that commits, the outcome would find no due row
      // of its own and be lost, and the delivery sent again once the lease ends.
      await batch.ended;
      awaitingBatch--;
      if (isSuccess(outcome)) {
        late.push({ row, outcome });
        recordLate();
      } else {
        recordingFailures++;
        try {
          if (await recordFailedAttempt(row, outcome, retries)) wake();
        } finally {
          recordingFailures--;
        }
      }
    }
    startWaiting();
    fill();
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
      for (const batch of open) {
        waiting.remove((entry) => entry.batch === batch);
        batch.unsent = 0;
        batch.unsentAt.clear();
        if (batch.inFlight.size === 0) batch.settle();
      }
      while (
        claiming > 0 ||
        open.size > 0 ||
        inFlight > 0 ||
        awaitingBatch > 0 ||
        recordingLate ||
        late.length > 0 ||
        recordingFailures > 0
      )
        await Bun.sleep(10);
    },
  };
}
