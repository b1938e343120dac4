/**
 * A claim's cost, and its record's, stay with the deliveries it takes, not with the size of the
 * delivery log or of the due set. The embedded database's claim (claimDue) once asked "is the delivery gone?" in
 * a form PostgreSQL answered by hashing the whole log, and moved its due rows by a join that
 * read the whole due set: with a week's log of 100,000 deliveries a claim of 128 cost 426–623 µs
 * a delivery, against 73–141 µs probed. The plans are read from PostgreSQL itself (auto_explain),
 * on tables analysed with a log of 20,000 delivered and 2,000 due; PGlite plans the same
 * statement with the same planner.
 */
import { afterEach, beforeAll, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { db } from "../../src/db/client";
import { type Attempted, claimDue, claimLocked, recordLocked } from "../../src/modules/webhooks/delivery";
import { call, newAccount } from "../helpers";
import { explained } from "../support/explained";

/** An endpoint with a log of 22,000 deliveries, 20,000 of them answered and the last 2,000 due, analysed. */
let endpointId: string;

/** Every delivery of the log still pending due now, as a claim finds them. */
const dueAgain = () =>
  db.execute(sql`
    insert into webhook_due (delivery_id, endpoint_id, sequence)
    select id, endpoint_id, sequence from webhook_deliveries where endpoint_id = ${endpointId} and status = 'pending'
    on conflict (delivery_id) do update set due_at = now()`);

beforeAll(async () => {
  const { accountId, apiKey } = await newAccount();
  const created = await call("POST", "/api/v1/webhooks", {
    headers: { authorization: `Bearer ${apiKey}` },
    body: { url: "http://127.0.0.1:9/parley" },
  });
  expect(created.status).toBe(201);
  endpointId = created.body.endpoint.id as string;
  // 22,000 events, their deliveries logged, the last 2,000 of them pending; ids as long as real ones, so that the
  // log has as many pages as a real one of its size (the planner weighs a scan of the log by them).
  await db.execute(sql`
    insert into events (id, account_id, sequence, type, data)
    select 'evt_' || md5(${accountId} || g), ${accountId}, g, 'room.started', '{"room":"plans"}'
    from generate_series(1, 22000) as g`);
  await db.execute(sql`
    insert into webhook_deliveries (account_id, endpoint_id, event_id, sequence, status, attempts, last_response)
    select ${accountId}, ${endpointId}, 'evt_' || md5(${accountId} || g), g, case when g > 20000 then 'pending' else 'succeeded' end, 1,
      case when g <= 20000 then '' end
    from generate_series(1, 22000) as g`);
  await dueAgain();
  await db.execute(sql`analyze events, webhook_deliveries, webhook_due`);
});

// Left due, they would be what the next files' claims on this database take first.
afterEach(() => db.execute(sql`delete from webhook_due where endpoint_id = ${endpointId}`));

/** How a plan reads the log, the due set and the events: "Seq webhook_due", "Index webhook_deliveries"… */
const scansOf = (plan: string) =>
  [...plan.matchAll(/(\w+(?: Only)?) Scan (?:using \S+ )?on (webhook_due|webhook_deliveries|events)\b/g)].map(
    ([, how, table]) => `${how} ${table}`,
  );

test("the embedded database's claim probes the log and moves its due rows where they lie", async () => {
  await dueAgain();
  const { notices } = await explained((tx) => claimDue(tx, 128));
  const plan = notices.find((notice) => notice.includes("update webhook_deliveries u"));
  expect(plan).toBeDefined();
  // How the claim reads each table: the log and the events only by probes; the due rows it drops or leases
  // straight where they lie (the pick itself scans the due set, stopping at the claim's size).
  const scans = scansOf(plan!);
  expect(scans.filter((scan) => scan.startsWith("Seq") && !scan.endsWith("webhook_due"))).toEqual([]);
  expect(scans.filter((scan) => scan === "Tid webhook_due")).toHaveLength(2);
});

test("a batch's record probes the log by key, whatever its outcomes", async () => {
  await dueAgain();
  const outcome = (statusCode: number) => ({ statusCode, response: "", latencyMs: 3 });
  const { notices } = await explained(async (tx) => {
    // The usual batch, every attempt a success, as large as the pump's (at 128 the planner probed the log anyway);
    // then one with a failure, an attempt still in flight and one unbegun.
    const sent = await claimLocked(tx, 512);
    expect(sent).toHaveLength(512);
    await recordLocked(
      tx,
      sent.map((row): Attempted => ({ row, outcome: outcome(204), at: Date.now() })),
      [],
    );
    const [failed, unfinished, unbegun] = await claimLocked(tx, 3);
    await recordLocked(
      tx,
      [{ row: failed!, outcome: outcome(500), at: Date.now() }],
      [{ row: unfinished!, at: Date.now() }],
      [unbegun!],
    );
  });
  const records = notices.filter((notice) => notice.includes("update webhook_deliveries d"));
  expect(records).toHaveLength(2);
  // Joined to the outcomes by a hash, a batch's record read every row of the log, at each batch: 8.6-15.6 ms a record
  // of 512 in isolation with 20,000 logged, against 2.3-3.9 ms probed.
  for (const plan of records) expect(scansOf(plan).filter((scan) => scan === "Seq webhook_deliveries")).toEqual([]);
});
