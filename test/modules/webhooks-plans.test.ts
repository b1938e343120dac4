/**
 * A claim's cost stays with the deliveries it takes, not with the size of the delivery log or
 * of the due set. The embedded database's claim (claimDue) once asked "is the delivery gone?" in
 * a form PostgreSQL answered by hashing the whole log, and moved its due rows by a join that
 * read the whole due set: with a week's log of 100,000 deliveries a claim of 128 cost 426–623 µs
 * a delivery, against 73–141 µs probed. The plans are read from PostgreSQL itself (auto_explain),
 * on tables analysed with a log of 20,000 delivered and 2,000 due; PGlite plans the same
 * statement with the same planner.
 */
import { expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { db } from "../../src/db/client";
import { claimDue } from "../../src/modules/webhooks/delivery";
import { call, newAccount } from "../helpers";
import { explained } from "../support/explained";

test("the embedded database's claim probes the log and moves its due rows where they lie", async () => {
  const { accountId, apiKey } = await newAccount();
  const created = await call("POST", "/api/v1/webhooks", {
    headers: { authorization: `Bearer ${apiKey}` },
    body: { url: "http://127.0.0.1:9/parley" },
  });
  expect(created.status).toBe(201);
  const endpointId = created.body.endpoint.id as string;
  // 22,000 events, their deliveries logged, the last 2,000 of them due.
  await db.execute(sql`
    insert into events (id, account_id, sequence, type, data)
    select ${`${accountId}-plan-`} || g, ${accountId}, g, 'room.started', '{"room":"plans"}'
    from generate_series(1, 22000) as g`);
  await db.execute(sql`
    insert into webhook_deliveries (account_id, endpoint_id, event_id, sequence, status, attempts)
    select ${accountId}, ${endpointId}, ${`${accountId}-plan-`} || g, g, case when g > 20000 then 'pending' else 'succeeded' end, 1
    from generate_series(1, 22000) as g`);
  await db.execute(sql`
    insert into webhook_due (delivery_id, endpoint_id, sequence)
    select id, endpoint_id, sequence from webhook_deliveries where endpoint_id = ${endpointId} and status = 'pending'`);
  await db.execute(sql`analyze events, webhook_deliveries, webhook_due`);

  try {
    const { notices } = await explained((tx) => claimDue(tx, 128));
    const plan = notices.find((notice) => notice.includes("update webhook_deliveries u"));
    expect(plan).toBeDefined();
    // How the claim reads each table: the log and the events only by probes; the due rows it drops or leases
    // straight where they lie (the pick itself scans the due set, stopping at the claim's size).
    const scans = [
      ...plan!.matchAll(/(\w+(?: Only)?) Scan (?:using \S+ )?on (webhook_due|webhook_deliveries|events)\b/g),
    ].map(([, how, table]) => `${how} ${table}`);
    expect(scans.filter((scan) => scan.startsWith("Seq") && !scan.endsWith("webhook_due"))).toEqual([]);
    expect(scans.filter((scan) => scan === "Tid webhook_due")).toHaveLength(2);
  } finally {
    // Left due, they would be what the next files' claims on this database take first.
    await db.execute(sql`delete from webhook_due where endpoint_id = ${endpointId}`);
  }
});
