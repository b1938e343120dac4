/**
 * Call records and the usage they feed. Each call writes its row in order through its own
 * promise chain, so signalling never waits on the database (an INVITE is answered as soon
 * as its room is known) and a slow write never reorders start, answer and end.
 */
import { and, desc, eq } from "drizzle-orm";
import { db } from "../src/db/client";
import { log } from "../src/http/log";
import { appendEvent } from "../src/modules/events/service";
import type { ResolvedRoom } from "./rooms";
import { sipCalls } from "./schema";

export type CallRecord = typeof sipCalls.$inferSelect;

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

  constructor(private readonly start: CallStart) {
    this.chain = db
      .insert(sipCalls)
      .values({ id: this.id, ...start, startedAt: new Date() })
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
      await db
        .update(sipCalls)
        .set({ accountId: room.accountId, room: room.room, resolvedBy: room.resolvedBy, mapperId: room.mapperId ?? null })
        .where(eq(sipCalls.id, this.id));
      await this.startedEvent();
    });
  }

  answered(): Promise<void> {
    const at = new Date();
    this.answeredAt = at;
    return this.write(async () => {
      await db.update(sipCalls).set({ answeredAt: at, finalStatus: 200 }).where(eq(sipCalls.id, this.id));
      await this.startedEvent();
    });
  }

  joined(): Promise<void> {
    const at = new Date();
    return this.write(() => db.update(sipCalls).set({ joinedAt: at }).where(eq(sipCalls.id, this.id)));
  }

  /** The usage event goes first, so a record with ended_at set is a call fully accounted for. */
  ended(reason: string, finalStatus?: number): Promise<void> {
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
      await db
        .update(sipCalls)
        .set({ endedAt: at, reason, ...(finalStatus === undefined ? {} : { finalStatus }) })
        .where(eq(sipCalls.id, this.id));
    });
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
