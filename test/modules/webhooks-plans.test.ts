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
import {
  type Attempted,
  type Claimed,
  claimDue,
  claimLocked,
  recordLocked,
  type ScanPosition,
} from "../../src/modules/webhooks/delivery";
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

test("a worker's claim goes on after its last one, past the rows its open batch holds", async () => {
  await dueAgain();
  const position: ScanPosition = {};
  // The worker's first batch, open while the next one claims.
  let claimed!: (rows: Claimed[]) => void;
  const first = new Promise<Claimed[]>((resolve) => {
    claimed = resolve;
  });
  let release!: () => void;
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  const open = db.transaction(async (tx) => {
    claimed(await claimLocked(tx, 512, [], undefined, position));
    await held;
  });
  const firstRows = await first;
  expect(firstRows).toHaveLength(512);
  const after = position.after;
  expect(after).toMatch(/^\(\d+,\d+\)$/);
  try {
    const { result: next, notices } = await explained((tx) => claimLocked(tx, 512, [], undefined, position));
    expect(next).toHaveLength(512);
    const taken = new Set(firstRows.map((row) => Number(row.id)));
    expect(next.filter((row) => taken.has(Number(row.id)))).toEqual([]);
    // It reads the due set from the first batch's last row on (a TID range), where from the heap's start it passed
    // over the first batch's 512 locked rows one lock at a time.
    const plan = notices.find((notice) => notice.includes("delete from webhook_due w"));
    expect(plan).toBeDefined();
    expect(plan).toContain(`ctid > '${after}'::tid`);
    expect(scansOf(plan!)).toContain("Range webhook_due");
    expect(position.after).not.toBe(after);
  } finally {
    release();
    await open;
  }
});

test("a claim past the end of the due set goes on from its start, and every due row is taken once", async () => {
  await dueAgain();
  const [due] = (await db.execute(
    sql`select count(*)::int as n, max(ctid)::text as last from webhook_due where endpoint_id = ${endpointId}`,
  )) as unknown as Array<{ n: number; last: string }>;
  // The log's pending deliveries: fewer than 2,000 once a test before has recorded some.
  expect(due!.n).toBeGreaterThan(1_024);
  // As after a claim of the due set's last rows: nothing lies after the position.
  const position: ScanPosition = { after: due!.last };
  await db.transaction(async (tx) => {
    const taken = new Set<number>();
    for (;;) {
      const rows = await claimLocked(tx, 512, [], undefined, position);
      if (rows.length === 0) break;
      for (const row of rows) {
        expect(taken.has(Number(row.id))).toBe(false);
        taken.add(Number(row.id));
      }
    }
    expect(taken.size).toBe(due!.n);
    // Nothing was due after it nor before: the next claim starts from the heap's start.
    expect(position.after).toBeUndefined();
  });
});
