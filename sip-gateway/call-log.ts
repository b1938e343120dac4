/**
 * Call records and the usage they feed. A call keeps its record in memory and has it written
 * whole by the process's one record writer (record-writer.ts), which says how writes are
 * batched and tried again. Signalling never waits on the database (an INVITE is answered as
 * soon as its room is known). Each step's promise resolves once the step is stored (or its
 * failure logged). A call the writer has to let go of without its end is ended by the
 * forgotten-call sweep (endForgottenCalls).
 */
import { and, desc, eq, isNull } from "drizzle-orm";
import { config } from "../src/core/config";
import { log } from "../src/core/log";
import { db } from "../src/db/client";
import type { ConferenceEvent } from "../src/modules/conference-log";
import { endLostCall, GATEWAY_NAME } from "./lost-calls";
import { type CallEnd, RecordWriter, type Snapshot, type WrittenCall } from "./record-writer";
import type { ResolvedRoom } from "./rooms";
import { type CallRecord, sipCalls } from "./schema";

export interface CallStart {
  callId: string;
  caller: string;
  callee: string;
  transport: string;
  source: string;
}

/**
 * Ids of the calls this process still holds and will still write: from their first step
 * until a write stored their end, or the writer let them go without it. An open record of
 * this gateway that is not here was forgotten (see endForgottenCalls).
 */
const held = new Set<string>();

const writer = new RecordWriter();

export class CallLog implements WrittenCall {
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
