/**
 * Call records and the usage they feed. Each call writes its row in order through its own
 * promise chain, so signalling never waits on the database (an INVITE is answered as soon
 * as its room is known) and a slow write never reorders start, answer and end.
 */
import { and, desc, eq } from "drizzle-orm";
import { db } from "../src/db/client";
import { log } from "../src/core/log";
import type { Database } from "../src/db/client";
import { appendEvent } from "../src/modules/events/service";
import { GATEWAY_NAME } from "./lost-calls";
import { recordEvent } from "../src/modules/webhooks/outbox";
import type { ResolvedRoom } from "./rooms";
import { type CallRecord, sipCalls } from "./schema";

export interface CallStart {
  callId: string;
  caller: string;
  callee: string;
  transport: string;
  source: string;
}

export class CallLog {
  readonly id = crypto.randomUUID();
  private chain: Promise<unknown>;
  private room: ResolvedRoom | undefined;
  private answeredAt: Date | undefined;
  private startedEventSent = false;
  private startedPublished = false;

  constructor(private readonly start: CallStart) {
    this.chain = db
      .insert(sipCalls)
      .values({ id: this.id, ...start, startedAt: new Date(), gateway: GATEWAY_NAME })
      .catch((error: Error) => log.error({ callId: start.callId, err: error.message }, "sip: call record insert failed"));
  }

  private write(step: () => Promise<unknown>): Promise<void> {
    const next: Promise<void> = this.chain.then(async () => {
      await step();
    }).catch((error: Error) => log.error({ callId: this.start.callId, err: error.message }, "sip: call record write failed"));
    this.chain = next;
    return next;
  }

  resolved(room: ResolvedRoom): Promise<void> {
    this.room = room;
    return this.write(async () => {
      await db.transaction(async (tx) => {
        await tx
          .update(sipCalls)
          .set({ accountId: room.accountId, room: room.room, resolvedBy: room.resolvedBy, mapperId: room.mapperId ?? null })
          .where(eq(sipCalls.id, this.id));
        await this.publishStarted(tx);
      });
      await this.startedEvent();
    });
  }

  answered(): Promise<void> {
    const at = new Date();
    this.answeredAt = at;
    return this.write(async () => {
      await db.transaction(async (tx) => {
        await tx.update(sipCalls).set({ answeredAt: at, finalStatus: 200 }).where(eq(sipCalls.id, this.id));
        await this.publishStarted(tx);
      });
      await this.startedEvent();
    });
  }

  joined(): Promise<void> {
    const at = new Date();
    return this.write(() => db.update(sipCalls).set({ joinedAt: at }).where(eq(sipCalls.id, this.id)));
  }

  /** The second leg: answered by `endpoint` (status 200), or the failure of the last endpoint tried. */
  mediaLeg(leg: { endpoint?: string; callId?: string; status: number }): Promise<void> {
    const at = new Date();
    return this.write(() =>
      db
        .update(sipCalls)
        .set({
          mediaEndpoint: leg.endpoint ?? null,
          mediaCallId: leg.callId ?? null,
          mediaStatus: leg.status,
          ...(leg.status === 200 ? { joinedAt: at } : {}),
        })
        .where(eq(sipCalls.id, this.id)),
    );
  }

  /** The usage event goes first, so a record with ended_at set is a call fully accounted for. */
  ended(reason: string, finalStatus?: number, packets?: { fromCaller: number; toCaller: number }): Promise<void> {
    const at = new Date();
    return this.write(async () => {
      if (this.room) {
        await appendEvent({
          accountId: this.room.accountId,
          kind: "call_ended",
          room: this.room.room,
          occurredAt: at,
          subject: this.start.callId,
          payload: { caller: this.start.caller, callee: this.start.callee, answered: this.answeredAt !== undefined, reason },
          dedupeKey: `call:${this.start.callId}:ended`,
        });
      }
      await db.transaction(async (tx) => {
        await tx
          .update(sipCalls)
          .set({
            endedAt: at,
            reason,
            ...(finalStatus === undefined ? {} : { finalStatus }),
            ...(packets ? { packetsFromCaller: packets.fromCaller, packetsToCaller: packets.toCaller } : {}),
          })
          .where(eq(sipCalls.id, this.id));
        if (this.room) await recordEvent(tx, this.room.accountId, "call.ended", { ...this.named(this.room), ended_at: at.toISOString(), answered: this.answeredAt !== undefined, duration_seconds: this.answeredAt ? Math.round((at.getTime() - this.answeredAt.getTime()) / 1000) : 0, reason });
      });
    });
  }

  private named(room: ResolvedRoom) {
    return { call_id: this.start.callId, room: room.room, caller: this.start.caller || null, callee: this.start.callee || null };
  }

  /** call.started, with whichever of room and answer is known last. */
  private async publishStarted(tx: Database): Promise<void> {
    if (this.startedPublished || !this.room || !this.answeredAt) return;
    await recordEvent(tx, this.room.accountId, "call.started", { ...this.named(this.room), started_at: this.answeredAt.toISOString() });
    this.startedPublished = true;
  }

  /** Phone minutes count from the answer, in the room the call joined: both must be known, in either order. */
  private async startedEvent(): Promise<void> {
    if (this.startedEventSent || !this.room || !this.answeredAt) return;
    this.startedEventSent = true;
    await appendEvent({
      accountId: this.room.accountId,
      kind: "call_started",
      room: this.room.room,
      occurredAt: this.answeredAt,
      subject: this.start.callId,
      payload: { caller: this.start.caller, callee: this.start.callee, answered: true, reason: null },
      dedupeKey: `call:${this.start.callId}:started`,
    });
  }
}

/** The records of one SIP Call-ID, newest first (optionally only one account's). */
export function callsById(callId: string, accountId?: string): Promise<CallRecord[]> {
  const where = accountId ? and(eq(sipCalls.callId, callId), eq(sipCalls.accountId, accountId)) : eq(sipCalls.callId, callId);
  return db.select().from(sipCalls).where(where).orderBy(desc(sipCalls.startedAt));
}
