/** Call records written together: what one write stores, and what a record that cannot be stored costs the others. */
import { describe, expect, test } from "bun:test";
import { asc, eq, sql } from "drizzle-orm";
import { db } from "../../src/db/client";
import { conferenceEvents } from "../../src/modules/events/schema";
import { events } from "../../src/modules/webhooks/schema";
import { CallLog, callsById } from "../../sip-gateway/call-log";
import { newAccount } from "../helpers";

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
});
