/**
 * A worker's claimed deliveries waiting for a slot, queued per endpoint and started in turn,
 * each endpoint holding at most its share of the slots: the slots over the endpoints that
 * have work in the worker (waiting or in flight) or had some within the last 250 ms, rounded
 * up. A receiver that never answers keeps each of its attempts in flight for
 * WEBHOOK_TIMEOUT_MS; capped at its share, it
 * leaves the other endpoints' deliveries the rest, where first come, first sent let its
 * backlog take every slot. An endpoint alone (for 250 ms) takes them all, so one busy
 * endpoint sends as fast as before; attempts in flight are not cut short when others come,
 * so those wait for its attempts to end, and its next ones start only below the new share.
 */
import type { Claimed } from "./delivery";

/**
 * How long an endpoint counts as having work after its last: the other endpoints' deliveries come and go in
 * moments, and a silent receiver alone between two of them would take every slot for WEBHOOK_TIMEOUT_MS. Short, as
 * the slots an endpoint gone quiet keeps from the others stay idle meanwhile.
 */
const RECENT_MS = 250;

/**
 * How long an endpoint at its share may go without an attempt ending before it counts as stalled: longer than the
 * gaps between a healthy receiver's answers, which end one after another while it holds its share (one endpoint
 * alone holds every slot, and is at its share all the time), even on a loaded machine where the worker or the
 * receiver waits 20-30 ms for a core now and then (at 20 ms, a claim in 400 was cut short by such a wait and gave its
 * rows back); short next to WEBHOOK_TIMEOUT_MS, which a silent receiver's attempts last.
 */
export const STALLED_MS = 50;

export class SlotShares<T extends { row: Claimed }> {
  /** In turn: an endpoint that starts an attempt goes to the back. */
  private readonly queues = new Map<string, T[]>();
  private readonly busy = new Map<string, number>();
  /** When each endpoint last had work here (performance.now()). */
  private readonly seen = new Map<string, number>();
  /** When each endpoint in flight last started an attempt while it had none, or ended one (performance.now()). */
  private readonly moved = new Map<string, number>();
  private waitingCount = 0;

  constructor(private readonly slots: number) {}

  get length(): number {
    return this.waitingCount;
  }

  push(entry: T): void {
    const queue = this.queues.get(entry.row.endpoint_id);
    if (queue) queue.push(entry);
    else this.queues.set(entry.row.endpoint_id, [entry]);
    this.waitingCount++;
    this.seen.set(entry.row.endpoint_id, performance.now());
  }

  /** Each endpoint's share of the slots now. */
  private share(): number {
    const now = performance.now();
    let active = 0;
    for (const [endpoint, at] of this.seen) {
      if (this.busy.has(endpoint) || this.queues.has(endpoint) || now - at < RECENT_MS) active++;
      else this.seen.delete(endpoint);
    }
    return Math.ceil(this.slots / Math.max(1, active));
  }

  /** The next delivery to start, counted in flight until `done`: none when every endpoint waiting is at its share. */
  next(): T | undefined {
    if (this.waitingCount === 0) return undefined;
    const share = this.share();
    for (const [endpoint, queue] of this.queues) {
      const busy = this.busy.get(endpoint) ?? 0;
      if (busy >= share) continue;
      const entry = queue.shift()!;
      this.queues.delete(endpoint);
      if (queue.length > 0) this.queues.set(endpoint, queue);
      this.busy.set(endpoint, busy + 1);
      if (busy === 0) this.moved.set(endpoint, performance.now());
      this.waitingCount--;
      return entry;
    }
    return undefined;
  }

  /** Attempts of `endpoint` in flight. */
  inFlight(endpoint: string): number {
    return this.busy.get(endpoint) ?? 0;
  }

  /** An attempt `next` started has ended. */
  done(row: Claimed): void {
    const now = performance.now();
    this.seen.set(row.endpoint_id, now);
    const busy = this.busy.get(row.endpoint_id)! - 1;
    if (busy > 0) {
      this.busy.set(row.endpoint_id, busy);
      this.moved.set(row.endpoint_id, now);
    } else {
      this.busy.delete(row.endpoint_id);
      this.moved.delete(row.endpoint_id);
    }
  }

  /**
   * The endpoints at their share or over it none of whose attempts ended for STALLED_MS: a claim leaves their due
   * rows to others (or to later), since this worker could not start them before its hold or lease ran out. One at
   * its share whose answers come is not among them: its attempts end and free its slots as fast as a claim's rows
   * can start, and leaving its rows out would only cut the claims short (an endpoint alone is always at its share).
   */
  full(): string[] {
    if (this.busy.size === 0) return [];
    const share = this.share();
    const now = performance.now();
    const full: string[] = [];
    for (const [endpoint, busy] of this.busy) if (this.stalled(endpoint, busy, share, now)) full.push(endpoint);
    return full;
  }

  /**
   * How long until `endpoints` (one or more) are all stalled, at their share with no attempt ended for STALLED_MS: 0
   * when they are, and a batch waiting on them alone can send nothing more for now; undefined when one is below
   * its share and may start an attempt at once.
   */
  stalledIn(endpoints: Iterable<string>): number | undefined {
    const share = this.share();
    const now = performance.now();
    let wait: number | undefined;
    for (const endpoint of endpoints) {
      const busy = this.busy.get(endpoint) ?? 0;
      if (busy < share) return undefined;
      wait = Math.max(wait ?? 0, STALLED_MS - (now - (this.moved.get(endpoint) ?? now)));
    }
    return wait === undefined ? undefined : Math.max(0, wait);
  }

  private stalled(endpoint: string, busy: number, share: number, now: number): boolean {
    return busy >= share && now - (this.moved.get(endpoint) ?? now) >= STALLED_MS;
  }

  /** Takes out the waiting deliveries `which` picks (all when not given). */
  remove(which: (entry: T) => boolean = () => true): T[] {
    const removed: T[] = [];
    for (const [endpoint, queue] of this.queues) {
      const kept: T[] = [];
      for (const entry of queue) (which(entry) ? removed : kept).push(entry);
      if (kept.length > 0) this.queues.set(endpoint, kept);
      else this.queues.delete(endpoint);
    }
    this.waitingCount -= removed.length;
    return removed;
  }
}
