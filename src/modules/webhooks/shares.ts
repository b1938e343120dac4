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

/**
 * How long an endpoint at its share with a share's worth of deliveries waiting may go without an attempt ending
 * before claims leave its rows (see SlotShares.fed): longer than a healthy receiver's answers take to come one after
 * another on a quiet machine, shorter than STALLED_MS, which also cuts batches.
 */
const FED_MS = 20;

/** An endpoint's place in SlotShares: one object, so each step looks it up once and allocates nothing. */
interface Endpoint<T> {
  /** Its deliveries waiting, from `head` on (taken by index: an array's shift moves every element left). */
  queue: T[];
  head: number;
  busy: number;
  /** When it last had work here, once it has none (performance.now()). */
  seen: number;
  /** When it last started an attempt while it had none, or ended one (performance.now()). */
  moved: number;
}

export class SlotShares<T extends { row: Claimed }> {
  private readonly endpoints = new Map<string, Endpoint<T>>();
  /** The endpoints with deliveries waiting, in turn: one that starts an attempt goes to the back. */
  private readonly turns = new Map<string, Endpoint<T>>();
  private waitingCount = 0;

  constructor(private readonly slots: number) {}

  get length(): number {
    return this.waitingCount;
  }

  push(entry: T): void {
    const id = entry.row.endpoint_id;
    let endpoint = this.endpoints.get(id);
    if (!endpoint) {
      endpoint = { queue: [], head: 0, busy: 0, seen: 0, moved: 0 };
      this.endpoints.set(id, endpoint);
    }
    // While it waits it counts as having work whatever `seen` says, so no clock is read here.
    if (endpoint.queue.push(entry) - endpoint.head === 1) this.turns.set(id, endpoint);
    this.waitingCount++;
  }

  /**
   * Each endpoint's share of the slots now. An endpoint alone known here has them all, and one below
   * the share of every endpoint known is below its share now: the clock is read only when neither says.
   */
  private share(): number {
    if (this.endpoints.size <= 1) return this.slots;
    const now = performance.now();
    let active = 0;
    for (const [id, endpoint] of this.endpoints) {
      if (endpoint.busy > 0 || endpoint.queue.length > endpoint.head || now - endpoint.seen < RECENT_MS) active++;
      else this.endpoints.delete(id);
    }
    return Math.ceil(this.slots / Math.max(1, active));
  }

  /** Whether an endpoint with `busy` attempts in flight is below its share; `share` is computed once asked. */
  private below(busy: number, share: { value?: number }): boolean {
    if (busy < Math.ceil(this.slots / this.endpoints.size)) return true;
    share.value ??= this.share();
    return busy < share.value;
  }

  /** The next delivery to start, counted in flight until `done`: none when every endpoint waiting is at its share. */
  next(): T | undefined {
    if (this.waitingCount === 0) return undefined;
    const share: { value?: number } = {};
    for (const [id, endpoint] of this.turns) {
      if (!this.below(endpoint.busy, share)) continue;
      const { queue } = endpoint;
      const entry = queue[endpoint.head]!;
      queue[endpoint.head++] = undefined as unknown as T;
      if (endpoint.head === queue.length) {
        queue.length = 0;
        endpoint.head = 0;
        this.turns.delete(id);
      } else if (this.turns.size > 1) {
        this.turns.delete(id);
        this.turns.set(id, endpoint);
      }
      if (endpoint.busy++ === 0) endpoint.moved = performance.now();
      this.waitingCount--;
      return entry;
    }
    return undefined;
  }

  /** Whether one endpoint at most has work here: it holds every slot, so it is at its share whenever they are busy. */
  alone(): boolean {
    return this.endpoints.size <= 1;
  }

  /** Attempts of `endpoint` in flight. */
  inFlight(endpoint: string): number {
    return this.endpoints.get(endpoint)?.busy ?? 0;
  }

  /** An attempt `next` started has ended (at `now`, performance.now()). */
  done(row: Claimed, now = performance.now()): void {
    const endpoint = this.endpoints.get(row.endpoint_id)!;
    endpoint.busy--;
    endpoint.seen = now;
    endpoint.moved = now;
  }

  /**
   * The endpoints at their share or over it none of whose attempts ended for STALLED_MS: a claim leaves their due
   * rows to others (or to later), since this worker could not start them before its hold or lease ran out. One at
   * its share whose answers come is not among them: its attempts end and free its slots as fast as a claim's rows
   * can start, and leaving its rows out would only cut the claims short (an endpoint alone is always at its share).
   */
  full(): string[] {
    const full: string[] = [];
    let share: number | undefined;
    let now = 0;
    for (const [id, endpoint] of this.endpoints) {
      if (endpoint.busy === 0) continue;
      if (share === undefined) {
        share = this.share();
        now = performance.now();
      }
      if (this.stalled(endpoint, share, now) || this.fed(endpoint, share, now)) full.push(id);
    }
    return full;
  }

  /**
   * How long until `endpoints` (one or more) are all stalled, at their share with no attempt ended for STALLED_MS: 0
   * when they are, and a batch waiting on them alone can send nothing more for now; undefined when one is below
   * its share and may start an attempt at once.
   */
  stalledIn(endpoints: Iterable<string>): number | undefined {
    const share: { value?: number } = {};
    let now: number | undefined;
    let wait: number | undefined;
    for (const id of endpoints) {
      const endpoint = this.endpoints.get(id);
      const busy = endpoint?.busy ?? 0;
      if (this.below(busy, share)) return undefined;
      now ??= performance.now();
      wait = Math.max(wait ?? 0, STALLED_MS - (now - endpoint!.moved));
    }
    return wait === undefined ? undefined : Math.max(0, wait);
  }

  /**
   * At its share with as many deliveries again waiting here, none of its attempts ended for FED_MS, while others
   * have work: more of its rows could start only after those, and a batch that holds them stays open meanwhile. A
   * silent receiver's first attempts, before it counts as stalled, left one such row in each of three batches. One
   * whose answers come is not so, or each of its answers would wake a claim that leaves its rows out again (every
   * endpoint of a backlog has rows waiting). An endpoint alone is never so: it holds every slot, and its claims
   * must not come back empty.
   */
  private fed(endpoint: Endpoint<T>, share: number, now: number): boolean {
    return (
      !this.alone() &&
      endpoint.busy >= share &&
      endpoint.queue.length - endpoint.head >= share &&
      now - endpoint.moved >= FED_MS
    );
  }

  private stalled(endpoint: Endpoint<T>, share: number, now: number): boolean {
    return endpoint.busy >= share && now - endpoint.moved >= STALLED_MS;
  }

  /** Takes out the waiting deliveries `which` picks (all when not given). */
  remove(which: (entry: T) => boolean = () => true): T[] {
    const removed: T[] = [];
    for (const [id, endpoint] of this.turns) {
      const kept: T[] = [];
      for (let i = endpoint.head; i < endpoint.queue.length; i++) {
        const entry = endpoint.queue[i]!;
        (which(entry) ? removed : kept).push(entry);
      }
      endpoint.queue = kept;
      endpoint.head = 0;
      if (kept.length === 0) {
        this.turns.delete(id);
        // It had work until now.
        endpoint.seen = performance.now();
      }
    }
    this.waitingCount -= removed.length;
    return removed;
  }
}
