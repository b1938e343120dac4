/**
 * Call records and the usage they feed. A call keeps its record in memory and has it
 * written whole (an upsert by id) by the process's one record writer: the calls whose
 * record changed since the last write go into the next one, so at a high call rate the
 * database sees a few statements per batch of calls instead of a dozen round trips per
 * call, and the gateway's core goes to signalling. Signalling never waits on the
 * database (an INVITE is answered as soon as its room is known), and one write at a time,
 * of whole records, means a slow write never reorders start, answer and end. Each step's
 * promise resolves once the step is stored (or its failure logged). A write the database
 * could not take (down, or failing over) is tried again until it can, so a call that ends
 * during an outage keeps its end; a call the writer has to let go of without its end is
 * ended by the forgotten-call sweep (endForgottenCalls).
 */
import { and, desc, eq, isNull, sql } from "drizzle-orm";
import { config } from "../src/core/config";
import { db } from "../src/db/client";
import { dependencyFailure, isDependencyDown } from "../src/core/errors";
import { log } from "../src/core/log";
import { type ConferenceEvent, storeEvents } from "../src/modules/conference-log";
import { recordEvents } from "../src/modules/catalogue";
import { endLostCall, GATEWAY_NAME } from "./lost-calls";
import type { ResolvedRoom } from "./rooms";
import { type CallRecord, sipCalls } from "./schema";

export interface CallStart {
  callId: string;
  caller: string;
  callee: string;
  transport: string;
  source: string;
}

type Row = typeof sipCalls.$inferInsert;

interface CallEnd {
  at: Date;
  reason: string;
  finalStatus?: number;
  packets?: { fromCaller: number; toCaller: number };
}

/** What one write stores of a call, taken when the write starts. */
interface Snapshot {
  log: CallLog;
  row: Row;
  room: ResolvedRoom | undefined;
  answeredAt: Date | undefined;
  end: CallEnd | undefined;
  publishStarted: boolean;
  publishEnded: boolean;
  /** The usage events (call_started, call_ended) this write appends. */
  usage: ConferenceEvent[];
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

/**
 * Ids of the calls this process still holds and will still write: from their first step
 * until a write stored their end, or the writer let them go without it. An open record of
 * this gateway that is not here was forgotten (see endForgottenCalls).
 */
const held = new Set<string>();

/** The gateway process's writer of call records: one write in flight, the calls changed since in the next ones. */
class RecordWriter {
  private waiting = new Map<CallLog, Array<() => void>>();
  /** Calls whose last write the database could not take, oldest first, for the next try. */
  private retrying = new Set<CallLog>();
  private retryTimer: ReturnType<typeof setTimeout> | undefined;
  private running = false;
  private lastWrite = Number.NEGATIVE_INFINITY;
  /** Ends the wait before the next write early, once a full write is waiting. */
  private full: (() => void) | undefined;

  /** Resolves once the call's record as it is now is stored (or its failure logged). */
  changed(call: CallLog): Promise<void> {
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
      const batch = new Map<CallLog, Array<() => void>>();
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

const writer = new RecordWriter();

export class CallLog {
  readonly id = crypto.randomUUID();
  private readonly startedAt = new Date();
  private room: ResolvedRoom | undefined;
  private answeredAt: Date | undefined;
  private joinedAt: Date | undefined;
  private finalStatus: number | undefined;
  private media: { endpoint: string | null; callId: string | null; status: number } | undefined;
  private end: CallEnd | undefined;
  /** A committed write held the call's start (its call_started and call.started events), or its end. */
  private startStored = false;
  private endStored = false;

  constructor(private readonly start: CallStart) {
    held.add(this.id);
    void writer.changed(this);
  }

  resolved(room: ResolvedRoom): Promise<void> {
    this.room = room;
    return writer.changed(this);
  }

  answered(): Promise<void> {
    this.answeredAt = new Date();
    this.finalStatus = 200;
    return writer.changed(this);
  }

  joined(): Promise<void> {
    this.joinedAt = new Date();
    return writer.changed(this);
  }

  /** The second leg: answered by `endpoint` (status 200), or the failure of the last endpoint tried. */
  mediaLeg(leg: { endpoint?: string; callId?: string; status: number }): Promise<void> {
    this.media = { endpoint: leg.endpoint ?? null, callId: leg.callId ?? null, status: leg.status };
    if (leg.status === 200) this.joinedAt = new Date();
    return writer.changed(this);
  }

  ended(reason: string, finalStatus?: number, packets?: { fromCaller: number; toCaller: number }): Promise<void> {
    this.end = { at: new Date(), reason, finalStatus, packets };
    if (finalStatus !== undefined) this.finalStatus = finalStatus;
    return writer.changed(this);
  }

  snapshot(): Snapshot {
    const { room, answeredAt, end } = this;
    return {
      log: this,
      room,
      answeredAt,
      end,
      publishStarted: room !== undefined && answeredAt !== undefined && !this.startStored,
      publishEnded: room !== undefined && end !== undefined && !this.endStored,
      usage: this.usage(room, answeredAt, end),
      row: {
        id: this.id,
        ...this.start,
        startedAt: this.startedAt,
        gateway: GATEWAY_NAME,
        accountId: room?.accountId ?? null,
        room: room?.room ?? null,
        resolvedBy: room?.resolvedBy ?? null,
        mapperId: room?.mapperId ?? null,
        answeredAt: answeredAt ?? null,
        joinedAt: this.joinedAt ?? null,
        endedAt: end?.at ?? null,
        finalStatus: this.finalStatus ?? null,
        reason: end?.reason ?? null,
        mediaEndpoint: this.media?.endpoint ?? null,
        mediaCallId: this.media?.callId ?? null,
        mediaStatus: this.media?.status ?? null,
        packetsFromCaller: end?.packets?.fromCaller ?? null,
        packetsToCaller: end?.packets?.toCaller ?? null,
      },
    };
  }

  /**
   * Phone minutes count from the answer, in the room the call joined: call_started once both
   * are known, call_ended at the end; each until a write that holds it has committed.
   */
  private usage(
    room: ResolvedRoom | undefined,
    answeredAt: Date | undefined,
    end: CallEnd | undefined,
  ): ConferenceEvent[] {
    if (!room) return [];
    const subject = this.start.callId;
    const payload = { caller: this.start.caller, callee: this.start.callee };
    const where = { accountId: room.accountId, room: room.room, subject };
    const events: ConferenceEvent[] = [];
    if (answeredAt && !this.startStored) {
      events.push({
        ...where,
        kind: "call_started",
        occurredAt: answeredAt,
        payload: { ...payload, answered: true, reason: null },
        dedupeKey: `call:${subject}:started`,
      });
    }
    if (end && !this.endStored) {
      events.push({
        ...where,
        kind: "call_ended",
        occurredAt: end.at,
        payload: { ...payload, answered: answeredAt !== undefined, reason: end.reason },
        dedupeKey: `call:${subject}:ended`,
      });
    }
    return events;
  }

  /** A write committed: its usage and catalogue events are out (a snapshot holds both of a step, or neither). */
  stored(snapshot: Snapshot): void {
    if (snapshot.publishStarted) this.startStored = true;
    if (snapshot.publishEnded) this.endStored = true;
    if (snapshot.end) held.delete(this.id);
  }

  /**
   * The writer gives up on the call's last write. A call still going is written whole at its
   * next step; one that has ended has nothing more coming, and is left to the forgotten-call sweep.
   */
  letGo(): void {
    if (this.end) held.delete(this.id);
  }
}

/** The records of one SIP Call-ID, newest first (optionally only one account's). */
export function callsById(callId: string, accountId?: string): Promise<CallRecord[]> {
  const where = accountId
    ? and(eq(sipCalls.callId, callId), eq(sipCalls.accountId, accountId))
    : eq(sipCalls.callId, callId);
  return db.select().from(sipCalls).where(where).orderBy(desc(sipCalls.startedAt));
}

/**
 * Ends this gateway's open calls that it no longer holds: calls whose end the writer had to
 * let go of (an outage past MAX_RETRYING calls, a record the database refused), or left open
 * by an earlier process of the same name (a container's pid is often the same after a restart).
 * Other gateways see this one beat, so the lost-call sweep never looks at them. The end
 * is unknown here: it is now, or the longest a call may last if that came first. Answers how
 * many it ended. `open`: this gateway's open calls, read here unless the caller has them.
 */
export async function endForgottenCalls(now = Date.now(), open?: CallRecord[]): Promise<number> {
  open ??= await db
    .select()
    .from(sipCalls)
    .where(and(eq(sipCalls.gateway, GATEWAY_NAME), isNull(sipCalls.endedAt)));
  let ended = 0;
  for (const call of open) {
    // Held: its end is still to be written by this process (or being written as this runs).
    if (held.has(call.id)) continue;
    const longest = call.startedAt.getTime() + config.sip.maxCallSeconds * 1000;
    try {
      await endLostCall(call, new Date(Math.min(now, longest)), "record_lost");
      ended++;
    } catch (error) {
      // One call the database refuses (its account deleted, say) must not keep the others open.
      log.error({ callId: call.callId, err: (error as Error).message }, "sip: ending a forgotten call failed");
    }
  }
  return ended;
}
