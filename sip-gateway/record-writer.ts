/**
 * The gateway process's one writer of call records, each written whole (an upsert by id): the
 * calls whose record changed since the last write go into the next one, so at a high call rate
 * the database sees a few statements per batch of calls instead of a dozen round trips per
 * call, and the gateway's core goes to signalling. One write at a time, of whole records,
 * means a slow write never reorders start, answer and end. A write the database could not take
 * (down, or failing over) is tried again until it can, so a call that ends during an outage
 * keeps its end. Apart from the calls' records themselves (call-log.ts), which only tell the
 * writer that they changed.
 */
import { sql } from "drizzle-orm";
import { dependencyFailure, isDependencyDown } from "../src/core/errors";
import { log } from "../src/core/log";
import { db } from "../src/db/client";
import { recordEvents } from "../src/modules/catalogue";
import { type ConferenceEvent, storeEvents } from "../src/modules/conference-log";
import type { ResolvedRoom } from "./rooms";
import { sipCalls } from "./schema";

export type Row = typeof sipCalls.$inferInsert;

export interface CallEnd {
  at: Date;
  reason: string;
  finalStatus?: number;
  packets?: { fromCaller: number; toCaller: number };
}

/** What one write stores of a call, taken when the write starts. */
export interface Snapshot {
  log: WrittenCall;
  row: Row;
  room: ResolvedRoom | undefined;
  answeredAt: Date | undefined;
  end: CallEnd | undefined;
  publishStarted: boolean;
  publishEnded: boolean;
  /** The usage events (call_started, call_ended) this write appends. */
  usage: ConferenceEvent[];
}

/** What the writer needs of a call: its record as it is now, and to tell it what became of a write. */
export interface WrittenCall {
  snapshot(): Snapshot;
  /** A write that held this snapshot committed. */
  stored(snapshot: Snapshot): void;
  /** The writer gives up on the call's last write. */
  letGo(): void;
}

/** Columns a later write may change; the rest are set once, by the first. */
const CHANGING = {
  accountId: sql.raw("excluded.account_id"),
  room: sql.raw("excluded.room"),
  resolvedBy: sql.raw("excluded.resolved_by"),
  mapperId: sql.raw("excluded.mapper_id"),
  answeredAt: sql.raw("excluded.answered_at"),
  joinedAt: sql.raw("excluded.joined_at"),
  endedAt: sql.raw("excluded.ended_at"),
  finalStatus: sql.raw("excluded.final_status"),
  reason: sql.raw("excluded.reason"),
  mediaEndpoint: sql.raw("excluded.media_endpoint"),
  mediaCallId: sql.raw("excluded.media_call_id"),
  mediaStatus: sql.raw("excluded.media_status"),
  packetsFromCaller: sql.raw("excluded.packets_from_caller"),
  packetsToCaller: sql.raw("excluded.packets_to_caller"),
};
/**
 * Calls per write. A larger write would hand the event loop thousands of rows and their
 * answers in one burst, and every INVITE that arrives meanwhile would wait behind them; the
 * rest of a backlog goes in the next writes.
 */
const CALLS_PER_WRITE = 100;
/**
 * A write starts at least this long after the previous one unless a full one is waiting. A
 * write's statements cost about as much for one call as for a hundred, and at a low call rate
 * a write at once would carry a step or two of one call: some 1.8 writes per call at 200
 * calls/s. Records land this much later; signalling never waits on them.
 */
const WRITE_EVERY_MS = 50;
/** A write the database could not take is tried again this long after: an outage is not hammered. */
const RETRY_AFTER_MS = 1_000;
/**
 * Calls kept for another try at most, so an outage never grows memory without bound (some
 * 20 MB; at 200 calls/s a 100 s outage). Beyond it the oldest is let go, and if it has ended,
 * the forgotten-call sweep ends its record once the database is back.
 */
const MAX_RETRYING = 20_000;

/** The gateway process's writer of call records: one write in flight, the calls changed since in the next ones. */
export class RecordWriter {
  private waiting = new Map<WrittenCall, Array<() => void>>();
  /** Calls whose last write the database could not take, oldest first, for the next try. */
  private retrying = new Set<WrittenCall>();
  private retryTimer: ReturnType<typeof setTimeout> | undefined;
  private running = false;
  private lastWrite = Number.NEGATIVE_INFINITY;
  /** Ends the wait before the next write early, once a full write is waiting. */
  private full: (() => void) | undefined;

  /** Resolves once the call's record as it is now is stored (or its failure logged). */
  changed(call: WrittenCall): Promise<void> {
    return new Promise((resolve) => {
      const waiters = this.waiting.get(call);
      if (waiters) waiters.push(resolve);
      else this.waiting.set(call, [resolve]);
      if (this.waiting.size >= CALLS_PER_WRITE) this.full?.();
      if (this.running) return;
      this.running = true;
      // At once: under load a timer or an immediate asked for from inside the socket's handler
      // was seen to wait seconds. Calls that change while a write is in flight join the next.
      queueMicrotask(() => void this.drain());
    });
  }

  private async drain(): Promise<void> {
    while (this.waiting.size > 0) {
      const wait = this.lastWrite + WRITE_EVERY_MS - performance.now();
      if (wait > 0 && this.waiting.size < CALLS_PER_WRITE) await this.gather(wait);
      this.lastWrite = performance.now();
      const batch = new Map<WrittenCall, Array<() => void>>();
      for (const [call, waiters] of this.waiting) {
        if (batch.size === CALLS_PER_WRITE) break;
        batch.set(call, waiters);
      }
      for (const call of batch.keys()) {
        this.waiting.delete(call);
        this.retrying.delete(call);
      }
      await this.write([...batch.keys()].map((call) => call.snapshot()));
      for (const waiters of batch.values()) for (const resolve of waiters) resolve();
    }
    this.running = false;
  }

  /** Waits `ms`, or less if a full write's calls change meanwhile (a timer may fire late under load). */
  private gather(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => this.full?.(), ms);
      this.full = () => {
        clearTimeout(timer);
        this.full = undefined;
        resolve();
      };
    });
  }

  /**
   * Stores the snapshots. The steps' promises resolve after this whatever happened, so a call
   * never waits on the database to finish (and free its place in the gateway); what the
   * database could not take is kept for another try instead.
   */
  private async write(snapshots: Snapshot[]): Promise<void> {
    try {
      await store(snapshots);
      return;
    } catch (error) {
      // Unreachable: each call on its own would fail the same way, each waiting on a connection attempt.
      if (isDependencyDown(error)) return this.retryLater(snapshots, error);
    }
    // One bad record (its account deleted mid-call, say) must not lose the others: each on its own.
    for (const snapshot of snapshots) {
      try {
        await store([snapshot]);
      } catch (error) {
        if (isDependencyDown(error)) {
          this.retryLater([snapshot], error);
          continue;
        }
        // An end that cannot be accounted for (its usage event refused, say) is left out, and the rest stored.
        const storedOpen =
          snapshot.end !== undefined &&
          (await store([withoutEnd(snapshot)]).then(
            () => true,
            () => false,
          ));
        snapshot.log.letGo();
        log.error(
          { callId: snapshot.row.callId, storedOpen, err: (error as Error).message },
          "sip: call record write failed",
        );
      }
    }
  }

  /** Keeps the snapshots' calls for a write of their whole records again in RETRY_AFTER_MS. */
  private retryLater(snapshots: Snapshot[], error: unknown): void {
    for (const { log: call } of snapshots) {
      this.retrying.delete(call);
      this.retrying.add(call);
    }
    let dropped = 0;
    for (const oldest of this.retrying) {
      if (this.retrying.size <= MAX_RETRYING) break;
      this.retrying.delete(oldest);
      oldest.letGo();
      dropped++;
    }
    log.warn(
      { calls: snapshots.length, retrying: this.retrying.size, dropped, err: dependencyFailure(error) },
      "sip: call records not written, the database is unreachable; trying again",
    );
    if (this.retryTimer) return;
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined;
      const calls = [...this.retrying];
      this.retrying.clear();
      for (const call of calls) void this.changed(call);
    }, RETRY_AFTER_MS);
    // A gateway stays up on its sockets; a process that only records calls may exit with calls unwritten.
    this.retryTimer.unref?.();
  }
}

/**
 * A call whose end could not be accounted for is stored as still open, and the writer lets it
 * go: the forgotten-call sweep ends it, never twice.
 */
function withoutEnd(snapshot: Snapshot): Snapshot {
  const row = { ...snapshot.row, endedAt: null, reason: null, packetsFromCaller: null, packetsToCaller: null };
  const usage = snapshot.usage.filter((event) => event.kind !== "call_ended");
  return { ...snapshot, row, end: undefined, publishEnded: false, usage };
}

/**
 * The records, their usage events and their catalogue events (call.started, call.ended) in one
 * transaction, so a record with ended_at set is a call fully accounted for. Each statement
 * takes the whole batch: one insert of the usage events, one upsert of the records, one
 * append of each catalogue type per account (an account's call.started events before its
 * call.ended ones, so each call's start still comes before its end). Once committed, the
 * outbox rings each room's fold and the webhooks (src/core/outbox.ts), as for any stored event.
 */
async function store(snapshots: Snapshot[]): Promise<void> {
  await db.transaction(async (tx) => {
    const { isNew } = await storeEvents(
      tx,
      snapshots.flatMap((snapshot) => snapshot.usage),
    );
    await tx
      .insert(sipCalls)
      .values(snapshots.map((snapshot) => snapshot.row))
      .onConflictDoUpdate({ target: sipCalls.id, set: CHANGING });
    for (const [accountId, events] of catalogueEvents(snapshots, isNew)) {
      if (events.started.length > 0) await recordEvents(tx, accountId, "call.started", events.started);
      if (events.ended.length > 0) await recordEvents(tx, accountId, "call.ended", events.ended);
    }
  });
  // The calls' steps are stored now and resolve without waiting on Redis: the outbox rings the
  // fold and the webhooks once the transaction has committed, and their sweeps cover a lost ring.
  for (const snapshot of snapshots) snapshot.log.stored(snapshot);
}

type CatalogueData<T extends "call.started" | "call.ended"> = Parameters<typeof recordEvents<T>>[3][number];

/**
 * The catalogue events of a write, by account: a step's only if its usage event is new
 * (`isNew`, in the order of the snapshots' usage). A write tried again after its commit's
 * answer was lost (the connection cut as it committed) finds them stored, and tells nothing twice.
 */
function catalogueEvents(snapshots: Snapshot[], isNew: boolean[]) {
  const byAccount = new Map<
    string,
    { started: Array<CatalogueData<"call.started">>; ended: Array<CatalogueData<"call.ended">> }
  >();
  let next = 0;
  for (const snapshot of snapshots) {
    const fresh = new Set(snapshot.usage.filter(() => isNew[next++]).map((event) => event.kind));
    const { room, answeredAt, end } = snapshot;
    if (!room || !(snapshot.publishStarted || snapshot.publishEnded)) continue;
    const events = byAccount.get(room.accountId) ?? { started: [], ended: [] };
    byAccount.set(room.accountId, events);
    const named = {
      call_id: snapshot.row.callId,
      room: room.room,
      caller: snapshot.row.caller || null,
      callee: snapshot.row.callee || null,
    };
    if (snapshot.publishStarted && answeredAt && fresh.has("call_started"))
      events.started.push({ ...named, started_at: answeredAt.toISOString() });
    if (snapshot.publishEnded && end && fresh.has("call_ended")) {
      const duration = answeredAt ? Math.round((end.at.getTime() - answeredAt.getTime()) / 1000) : 0;
      events.ended.push({
        ...named,
        ended_at: end.at.toISOString(),
        answered: answeredAt !== undefined,
        duration_seconds: duration,
        reason: end.reason,
      });
    }
  }
  return byAccount;
}
