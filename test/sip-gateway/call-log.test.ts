/**
 * Call records written together: what one write stores, what a record that cannot be stored
 * costs the others, and what becomes of a call's end while the database cannot take it.
 */
import { describe, expect, test } from "bun:test";
import { asc, eq, sql } from "drizzle-orm";
import { db } from "../../src/db/client";
import { conferenceEvents } from "../../src/modules/conference-log/schema";
import { events } from "../../src/modules/catalogue";
import { CallLog, callsById, endForgottenCalls } from "../../sip-gateway/call-log";
import { GATEWAY_NAME } from "../../sip-gateway/lost-calls";
import { sipCalls } from "../../sip-gateway/schema";
import { newAccount } from "../helpers";
import { until } from "../support/wait";
import { cutWritesTo } from "../support/write-cuts";

const start = (callId: string) => ({
  callId,
  caller: "+15551230001@127.0.0.1",
  callee: "gateway@127.0.0.1",
  transport: "UDP",
  source: "127.0.0.1:5060",
});

describe("call records", () => {
  test("calls changing together are each stored whole, with their usage and catalogue events, each once", async () => {
    const { accountId } = await newAccount();
    const ids = Array.from({ length: 150 }, () => `batch-${crypto.randomUUID()}`);
    const logs = ids.map((callId) => new CallLog(start(callId)));
    await Promise.all(logs.map((log) => log.resolved({ accountId, room: "phones", resolvedBy: "header" })));
    await Promise.all(logs.map((log) => log.answered()));
    await Promise.all(logs.map((log) => log.ended("caller_bye")));
    for (const callId of [ids[0]!, ids[149]!]) {
      const [record] = await callsById(callId);
      expect(record).toMatchObject({
        accountId,
        room: "phones",
        resolvedBy: "header",
        finalStatus: 200,
        reason: "caller_bye",
      });
      expect(record!.endedAt!.getTime()).toBeGreaterThanOrEqual(record!.answeredAt!.getTime());
      const usage = await db.select().from(conferenceEvents).where(eq(conferenceEvents.subject, callId));
      expect(usage.map((event) => event.kind).sort()).toEqual(["call_ended", "call_started"]);
      const catalogue = await db
        .select({ type: events.type })
        .from(events)
        .where(sql`${events.accountId} = ${accountId} and ${events.data}->>'call_id' = ${callId}`)
        .orderBy(asc(events.sequence));
      expect(catalogue.map((event) => event.type)).toEqual(["call.started", "call.ended"]);
    }
    const [counts] = await db
      .select({
        usage: sql<number>`count(*)::int`,
        calls: sql<number>`count(distinct ${conferenceEvents.subject})::int`,
      })
      .from(conferenceEvents)
      .where(eq(conferenceEvents.accountId, accountId));
    expect(counts).toEqual({ usage: 300, calls: 150 });
  });

  test("a record that cannot be stored does not lose the others written with it", async () => {
    const { accountId } = await newAccount();
    const good = new CallLog(start(`good-${crypto.randomUUID()}`));
    const orphan = new CallLog(start(`orphan-${crypto.randomUUID()}`));
    // Same turn of the event loop: both go into one write, which the missing account fails.
    await Promise.all([
      good.resolved({ accountId, room: "phones", resolvedBy: "header" }),
      orphan.resolved({ accountId: "acc_missing", room: "phones", resolvedBy: "header" }),
    ]);
    expect((await callsById(good.snapshot().row.callId))[0]).toMatchObject({ accountId, room: "phones" });
    expect(await callsById(orphan.snapshot().row.callId)).toEqual([]);
  });

  /** The catalogue events of one call, in order. */
  const told = (accountId: string, callId: string) =>
    db
      .select({ type: events.type, data: events.data })
      .from(events)
      .where(sql`${events.accountId} = ${accountId} and ${events.data}->>'call_id' = ${callId}`)
      .orderBy(asc(events.sequence));

  test("a call that ends while its writes are cut is stored ended, and told once, once they go through", async () => {
    const { accountId } = await newAccount();
    const callId = `cut-${crypto.randomUUID()}`;
    const call = new CallLog(start(callId));
    await call.resolved({ accountId, room: "phones", resolvedBy: "header" });
    await call.answered();
    expect((await callsById(callId))[0]?.answeredAt).toBeInstanceOf(Date);

    // Every write of the end cut, as a primary killed mid-failover cuts them, until several have been.
    const cuts = await cutWritesTo("sip_calls");
    try {
      await call.ended("caller_bye", undefined, { fromCaller: 10, toCaller: 12 });
      expect(
        await until(
          () => cuts.count,
          (count) => count >= 3,
          30_000,
        ),
      ).toBeGreaterThanOrEqual(3);
    } finally {
      await cuts.end();
    }
    const [record] = await until(
      () => callsById(callId),
      (rows) => rows[0]?.endedAt != null,
      15_000,
      100,
    );
    expect(record).toMatchObject({ reason: "caller_bye", packetsFromCaller: 10, packetsToCaller: 12 });
    const usage = await db.select().from(conferenceEvents).where(eq(conferenceEvents.subject, callId));
    expect(usage.map((event) => event.kind).sort()).toEqual(["call_ended", "call_started"]);
    expect((await told(accountId, callId)).map((event) => event.type)).toEqual(["call.started", "call.ended"]);
  }, 60_000);

  test("an open record of this gateway that it no longer holds is ended by the sweep; a held one is left", async () => {
    const { accountId } = await newAccount();
    const live = new CallLog(start(`live-${crypto.randomUUID()}`));
    await live.resolved({ accountId, room: "phones", resolvedBy: "header" });
    await live.answered();
    // As a record whose end the writer let go of leaves it: open, of this gateway, in no CallLog.
    const callId = `forgotten-${crypto.randomUUID()}`;
    const answeredAt = new Date(Date.now() - 30_000);
    await db.insert(sipCalls).values({
      ...start(callId),
      id: crypto.randomUUID(),
      startedAt: answeredAt,
      answeredAt,
      gateway: GATEWAY_NAME,
      accountId,
      room: "phones",
      resolvedBy: "header",
      finalStatus: 200,
    });

    expect(await endForgottenCalls()).toBeGreaterThanOrEqual(1);
    const [record] = await callsById(callId);
    expect(record).toMatchObject({ reason: "record_lost" });
    expect(record!.endedAt!.getTime()).toBeGreaterThan(answeredAt.getTime());
    const ended = await told(accountId, callId);
    expect(ended.map((event) => [event.type, (event.data as { reason: string }).reason])).toEqual([
      ["call.ended", "record_lost"],
    ]);
    expect((await callsById(live.snapshot().row.callId))[0]?.endedAt).toBeNull();
    // Looked at again: nothing more to end, nothing told twice.
    await endForgottenCalls();
    expect(await told(accountId, callId)).toHaveLength(1);
    await live.ended("caller_bye");
  });
});
