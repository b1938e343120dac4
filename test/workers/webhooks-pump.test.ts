/**
 * How webhooks workers share the deliveries they claim from the database: two workers on
 * one backlog send each delivery once. On PostgreSQL a claim is a batch's open transaction
 * deleting the deliveries' due rows: nothing is written into the log, a worker whose
 * connection dies leaves them due again at once, and a slow receiver holds the transaction
 * only so long, its attempts then leased. The embedded database's pump writes leases instead, and
 * one that stops gives back what it had claimed but not yet sent, with no attempt counted.
 */
import { expect, test } from "bun:test";
import { eq, inArray, sql } from "drizzle-orm";
import { overrideConfig } from "../../src/core/config";
import { db } from "../../src/db/client";
import { rowsOf } from "../../src/db/rows";
import { startLockedPump } from "../../src/modules/webhooks/locked-pump";
import { startDeliveryPump } from "../../src/modules/webhooks/pump";
import { recordEvent } from "../../src/modules/catalogue";
import { webhookDeliveries, webhookDue, webhookEndpoints, webhookParked } from "../../src/modules/webhooks/schema";
import { startWebhooksWorker } from "../../src/modules/webhooks/worker";
import { call, newAccount } from "../helpers";
import { until } from "../support/wait";
import { startReceiver } from "../support/webhook-receiver";

async function emitMany(accountId: string, count: number) {
  await db.transaction(async (tx) => {
    for (let i = 0; i < count; i++)
      await recordEvent(tx, accountId, "reservation.deleted", { reservation_id: i, room: `pump-${i}` });
  });
}

async function newEndpoint(apiKey: string, url: string, ordered = false) {
  const created = await call("POST", "/api/v1/webhooks", {
    headers: { authorization: `Bearer ${apiKey}` },
    body: { url, ordered },
  });
  expect(created.status).toBe(201);
  return { id: created.body.endpoint.id as string, secret: created.body.secret as string };
}

const endpointFor = async (apiKey: string, url: string) => (await newEndpoint(apiKey, url)).secret;

/** How many of an endpoint's deliveries are due, and how many set aside. */
const dueAndSetAside = async (endpointId: string) => [
  (await db.select().from(webhookDue).where(eq(webhookDue.endpointId, endpointId))).length,
  (await db.select().from(webhookParked).where(eq(webhookParked.endpointId, endpointId))).length,
];

test("two workers on one backlog send each delivery once", async () => {
  const a = await newAccount();
  let secret = "";
  const receiver = await startReceiver(() => secret);
  const workers = [
    startWebhooksWorker({ concurrency: 4, sweepIntervalMs: 200 }),
    startWebhooksWorker({ concurrency: 4, sweepIntervalMs: 200 }),
  ];
  try {
    secret = await endpointFor(a.apiKey, receiver.url);
    await emitMany(a.accountId, 300);
    await until(
      () => receiver.received.length,
      (n) => n >= 300,
      20_000,
    );
    await until(
      async () =>
        (await db.select().from(webhookDeliveries).where(eq(webhookDeliveries.accountId, a.accountId))).filter(
          (row) => row.status === "succeeded",
        ).length,
      (n) => n === 300,
    );
    await Bun.sleep(300);
    expect(receiver.received.length).toBe(300);
    expect(receiver.unique().length).toBe(300);
    expect(receiver.received.every((entry) => entry.verified)).toBe(true);
  } finally {
    await Promise.all(workers.map((worker) => worker.stop()));
    receiver.stop();
  }
}, 30_000);

test("a claim on PostgreSQL writes no log row; a worker whose connection dies frees its deliveries", async () => {
  const a = await newAccount();
  let secret = "";
  const receiver = await startReceiver(() => secret);
  const restoreConfig = overrideConfig({ webhooks: { timeoutMs: 10_000 } });
  // The batch's transaction held open for as long as the test needs it.
  const pump = startLockedPump(2, 60_000);
  let worker: ReturnType<typeof startWebhooksWorker> | undefined;
  try {
    secret = await endpointFor(a.apiKey, receiver.url);
    receiver.setMode("hang");
    await emitMany(a.accountId, 10);
    pump.wake();
    expect(await until(receiver.hanging, (n) => n === 2)).toBe(2);
    const rows = () => db.select().from(webhookDeliveries).where(eq(webhookDeliveries.accountId, a.accountId));
    // Claimed, two of them in flight, and not one log row written: no lease, no attempt counted.
    const during = await rows();
    expect(during.length).toBe(10);
    expect(during.every((row) => row.status === "pending" && row.leasedUntil === null && row.attempts === 0)).toBe(
      true,
    );
    const ids = during.map((row) => row.id);
    const lockable = () =>
      db.transaction(async (tx) =>
        rowsOf<{ delivery_id: number }>(
          await tx.execute(
            sql`select delivery_id from webhook_due where delivery_id = any(${sql.raw(`array[${ids.join(",")}]::bigint[]`)})
              for update skip locked`,
          ),
        ),
      );
    // The claim is the transaction's delete of the due rows, uncommitted: another worker's claim skips all ten.
    expect(await lockable()).toEqual([]);
    expect((await db.select().from(webhookDue).where(inArray(webhookDue.deliveryId, ids))).length).toBe(10);
    // The batches holding the ten: one, or two when the claim the pump made as it started and the wake's claim
    // ran at once and split them (seen on a loaded machine). A claim that found nothing writes nothing.
    const holders = await until(
      async () =>
        rowsOf<{ pid: number }>(
          await db.execute(sql`
            select pid from pg_stat_activity
            where datname = current_database() and state <> 'idle' and pid <> pg_backend_pid()
              -- It has written: its claim's delete.
              and backend_xid is not null`),
        ),
      (rows) => rows.length >= 1,
    );
    expect(holders.length).toBeGreaterThanOrEqual(1);
    expect(holders.length).toBeLessThanOrEqual(2);
    // The worker's connections die: their transactions end and every delivery is free at once, no lease to wait out.
    for (const holder of holders) await db.execute(sql`select pg_terminate_backend(${holder.pid})`);
    expect(
      await until(
        async () => (await lockable()).length,
        (n) => n === 10,
      ),
    ).toBe(10);
    expect((await rows()).every((row) => row.leasedUntil === null && row.attempts === 0)).toBe(true);
    receiver.setMode("ok");
    await pump.stop();
    worker = startWebhooksWorker({ concurrency: 4, sweepIntervalMs: 200 });
    expect(
      await until(
        async () => (await rows()).filter((row) => row.status === "succeeded").length,
        (n) => n === 10,
      ),
    ).toBe(10);
    // The two held attempts were answered once released (a 2xx this receiver does not log), the other eight sent anew.
    expect(receiver.unique().length).toBe(8);
    expect(receiver.unique().every((entry) => entry.verified)).toBe(true);
  } finally {
    await pump.stop();
    await worker?.stop();
    restoreConfig();
    receiver.stop();
  }
}, 30_000);

test("a batch waits a bounded time for a slow receiver: the rest commit, its attempts are leased", async () => {
  const a = await newAccount();
  const fast = await startReceiver(() => "");
  const slow = await startReceiver(() => "");
  const restoreConfig = overrideConfig({ webhooks: { timeoutMs: 10_000 } });
  const pump = startLockedPump(8, 300);
  try {
    const fastId = (await newEndpoint(a.apiKey, fast.url)).id;
    const slowId = (await newEndpoint(a.apiKey, slow.url)).id;
    slow.setMode("hang");
    // Each event goes to both endpoints: one batch claims all eight deliveries.
    await emitMany(a.accountId, 4);
    pump.wake();
    const rows = async (endpointId: string) =>
      (await db.select().from(webhookDeliveries).where(eq(webhookDeliveries.accountId, a.accountId))).filter(
        (row) => row.endpointId === endpointId,
      );
    // The slow endpoint's four attempts hang; after the hold the fast ones are committed
    // and the hanging ones leased, attempt counted, while they still wait for an answer.
    expect(
      await until(
        async () => (await rows(fastId)).filter((row) => row.status === "succeeded").length,
        (n) => n === 4,
      ),
    ).toBe(4);
    const held = await rows(slowId);
    expect(slow.hanging()).toBe(4);
    expect(held.every((row) => row.status === "pending" && row.leasedUntil !== null && row.attempts === 1)).toBe(true);
    // Answered at last: each recorded on its own, after the batch's commit.
    slow.setMode("ok");
    expect(
      await until(
        async () => (await rows(slowId)).filter((row) => row.status === "succeeded" && row.leasedUntil === null).length,
        (n) => n === 4,
      ),
    ).toBe(4);
    expect(fast.unique().length).toBe(4);
  } finally {
    await pump.stop();
    restoreConfig();
    fast.stop();
    slow.stop();
  }
}, 30_000);

test("what a bounded batch had not begun is due again, no attempt counted, and sent once a slot frees", async () => {
  const a = await newAccount();
  const receiver = await startReceiver(() => "");
  const restoreConfig = overrideConfig({ webhooks: { timeoutMs: 10_000 } });
  // One slot: of the five deliveries one batch claims, one is attempted and four wait for the slot.
  const pump = startLockedPump(1, 300);
  try {
    await newEndpoint(a.apiKey, receiver.url);
    receiver.setMode("hang");
    await emitMany(a.accountId, 5);
    pump.wake();
    const rows = () => db.select().from(webhookDeliveries).where(eq(webhookDeliveries.accountId, a.accountId));
    // After the hold the attempt in flight is leased, and the batch gives the other four back.
    const leased = await until(
      async () => (await rows()).filter((row) => row.leasedUntil !== null),
      (list) => list.length === 1,
    );
    expect(leased.length).toBe(1);
    const rest = (await rows()).filter((row) => row.leasedUntil === null);
    expect(rest.every((row) => row.status === "pending" && row.attempts === 0)).toBe(true);
    const due = await db
      .select()
      .from(webhookDue)
      .where(
        inArray(
          webhookDue.deliveryId,
          rest.map((row) => row.id),
        ),
      );
    expect(due.length).toBe(4);
    receiver.setMode("ok");
    expect(
      await until(
        async () => (await rows()).filter((row) => row.status === "succeeded").length,
        (n) => n === 5,
      ),
    ).toBe(5);
    expect(
      await db
        .select()
        .from(webhookDue)
        .where(
          inArray(
            webhookDue.deliveryId,
            leased.concat(rest).map((row) => row.id),
          ),
        ),
    ).toEqual([]);
  } finally {
    await pump.stop();
    restoreConfig();
    receiver.stop();
  }
}, 30_000);

/**
 * One delivery held by a batch (its attempt hanging at the receiver), then its endpoint deleted
 * through the API; `before` runs once the endpoint exists. Answers the endpoint's id.
 */
async function deleteWhileHeld(
  a: { accountId: string; apiKey: string },
  receiver: Awaited<ReturnType<typeof startReceiver>>,
  pump: ReturnType<typeof startLockedPump>,
  before: (endpointId: string) => Promise<unknown> = async () => {},
): Promise<string> {
  const { id } = await newEndpoint(a.apiKey, receiver.url);
  await before(id);
  receiver.setMode("hang");
  await emitMany(a.accountId, 1);
  pump.wake();
  expect(await until(receiver.hanging, (n) => n === 1)).toBe(1);
  // Nothing refers to the due row the batch holds, so the delete does not wait for the batch.
  const deleted = await call("DELETE", `/api/v1/webhooks/${id}`, {
    headers: { authorization: `Bearer ${a.apiKey}` },
  });
  expect(deleted.status).toBe(204);
  return id;
}

test("an endpoint deleted while a batch holds its deliveries goes at once; a claim drops its rest", async () => {
  const a = await newAccount();
  const receiver = await startReceiver(() => "");
  const restoreConfig = overrideConfig({ webhooks: { timeoutMs: 10_000 } });
  const pump = startLockedPump(2, 60_000);
  try {
    // A failing endpoint: the success below ends its failure run, which writes the endpoint's row.
    const id = await deleteWhileHeld(a, receiver, pump, (endpointId) =>
      db.update(webhookEndpoints).set({ failingSince: new Date() }).where(eq(webhookEndpoints.id, endpointId)),
    );
    expect(receiver.hanging()).toBe(1);
    // A transaction that has written, idle or running a statement: the batch's is 'active' while it records, and
    // counted only when idle the check passed while its claim (the due row's delete) was still uncommitted.
    const openClaims = async () =>
      rowsOf<{ n: number }>(
        await db.execute(sql`
          select count(*)::int as n from pg_stat_activity
          where datname = current_database() and backend_xid is not null and pid <> pg_backend_pid()`),
      )[0]!.n;
    expect(await openClaims()).toBe(1);
    receiver.setMode("ok");
    // The batch commits its outcome for a log row that is gone, then the endpoint's, also gone: no deadlock.
    expect(await until(openClaims, (n) => n === 0)).toBe(0);
    expect(await db.select().from(webhookEndpoints).where(eq(webhookEndpoints.id, id))).toEqual([]);
    expect(await db.select().from(webhookDue).where(eq(webhookDue.endpointId, id))).toEqual([]);
    // A retry scheduled by a batch that committed after such a delete is left behind: the next claim drops it.
    await db.insert(webhookDue).values({ deliveryId: -1, endpointId: id, sequence: 1 });
    pump.wake();
    expect(
      await until(
        async () => (await db.select().from(webhookDue).where(eq(webhookDue.endpointId, id))).length,
        (n) => n === 0,
      ),
    ).toBe(0);
  } finally {
    await pump.stop();
    restoreConfig();
    receiver.stop();
  }
}, 30_000);

test("an endpoint deleted with a backlog leaves nothing due that the next claims would have to drop", async () => {
  const a = await newAccount();
  const receiver = await startReceiver(() => "");
  let worker: ReturnType<typeof startWebhooksWorker> | undefined;
  try {
    // A backlog many claims long, deleted before any worker runs.
    const backlogged = await newEndpoint(a.apiKey, receiver.url);
    await emitMany(a.accountId, 300);
    const deleted = await call("DELETE", `/api/v1/webhooks/${backlogged.id}`, {
      headers: { authorization: `Bearer ${a.apiKey}` },
    });
    expect(deleted.status).toBe(204);
    expect(await db.select().from(webhookDue).where(eq(webhookDue.endpointId, backlogged.id))).toEqual([]);
    // The sweep far off: the next delivery goes on its doorbell alone, as a live one would. Claims that found
    // only the deleted endpoint's rows took their short answer for an empty due set and waited for the sweep.
    worker = startWebhooksWorker({ concurrency: 2, sweepIntervalMs: 60_000 });
    await newEndpoint(a.apiKey, receiver.url);
    await emitMany(a.accountId, 1);
    expect(
      await until(
        () => receiver.received.length,
        (n) => n >= 1,
      ),
    ).toBe(1);
  } finally {
    await worker?.stop();
    receiver.stop();
  }
}, 30_000);

test("a disabled endpoint's backlog is set aside, where no claim reads it, and enabling it sends it all", async () => {
  const a = await newAccount();
  const receiver = await startReceiver(() => "");
  let worker: ReturnType<typeof startWebhooksWorker> | undefined;
  try {
    const { id } = await newEndpoint(a.apiKey, receiver.url);
    await emitMany(a.accountId, 300);
    const headers = { authorization: `Bearer ${a.apiKey}` };
    const disabled = await call("PATCH", `/api/v1/webhooks/${id}`, { headers, body: { enabled: false } });
    expect(disabled.status).toBe(200);
    expect(await db.select().from(webhookDue).where(eq(webhookDue.endpointId, id))).toEqual([]);
    expect((await db.select().from(webhookParked).where(eq(webhookParked.endpointId, id))).length).toBe(300);
    // A replay meanwhile sets aside what it queues, too.
    const replayed = await call("POST", `/api/v1/webhooks/${id}/replay`, { headers, body: { after: 0 } });
    expect(replayed.body).toEqual({ queued: 300 });
    expect(await db.select().from(webhookDue).where(eq(webhookDue.endpointId, id))).toEqual([]);
    worker = startWebhooksWorker({ concurrency: 2, sweepIntervalMs: 60_000 });
    const enabled = await call("PATCH", `/api/v1/webhooks/${id}`, { headers, body: { enabled: true } });
    expect(enabled.status).toBe(200);
    expect(await db.select().from(webhookParked).where(eq(webhookParked.endpointId, id))).toEqual([]);
    expect(
      await until(
        () => new Set(receiver.received.map((entry) => entry.id)).size,
        (n) => n === 300,
      ),
    ).toBe(300);
  } finally {
    await worker?.stop();
    receiver.stop();
  }
}, 30_000);

test("an ordered endpoint keeps only its head due, the rest set aside, and sends them all in order", async () => {
  const a = await newAccount();
  const receiver = await startReceiver(() => "");
  let worker: ReturnType<typeof startWebhooksWorker> | undefined;
  try {
    const { id } = await newEndpoint(a.apiKey, receiver.url, true);
    // Of a backlog behind its head only the head may go: in the due set every claim, for every endpoint, read it all.
    await emitMany(a.accountId, 300);
    expect(await dueAndSetAside(id)).toEqual([1, 299]);
    // A replay of them all keeps it so.
    const headers = { authorization: `Bearer ${a.apiKey}` };
    const replayed = await call("POST", `/api/v1/webhooks/${id}/replay`, { headers, body: { after: 0 } });
    expect(replayed.body).toEqual({ queued: 300 });
    expect(await dueAndSetAside(id)).toEqual([1, 299]);
    worker = startWebhooksWorker({ concurrency: 4, sweepIntervalMs: 60_000 });
    const got = await until(
      () => receiver.received,
      (list) => list.length >= 300,
      20_000,
    );
    expect(got.map((entry) => entry.event.sequence)).toEqual(Array.from({ length: 300 }, (_, i) => i + 1));
    // The receiver has the last one before the worker records it: the due row goes a moment later.
    const left = await until(
      () => dueAndSetAside(id),
      ([due, setAside]) => due + setAside === 0,
      10_000,
    );
    expect(left).toEqual([0, 0]);
  } finally {
    await worker?.stop();
    receiver.stop();
  }
}, 30_000);

test("an endpoint made unordered has all it set aside due at once, and made ordered again its head", async () => {
  const a = await newAccount();
  const { id } = await newEndpoint(a.apiKey, "http://127.0.0.1:9/hook", true);
  const patch = (ordered: boolean) =>
    call("PATCH", `/api/v1/webhooks/${id}`, { headers: { authorization: `Bearer ${a.apiKey}` }, body: { ordered } });
  await emitMany(a.accountId, 50);
  expect(await dueAndSetAside(id)).toEqual([1, 49]);
  expect((await patch(false)).status).toBe(200);
  expect(await dueAndSetAside(id)).toEqual([50, 0]);
  expect((await patch(true)).status).toBe(200);
  expect(await dueAndSetAside(id)).toEqual([1, 49]);
  const [head] = await db.select().from(webhookDue).where(eq(webhookDue.endpointId, id));
  expect(head!.sequence).toBe(1);
  // Left due, its head would be tried by the later tests' pumps, and take a share of their slots.
  await db.delete(webhookEndpoints).where(eq(webhookEndpoints.id, id));
});

test("the sweep brings forward an ordered endpoint's next delivery that nothing else did", async () => {
  const a = await newAccount();
  const receiver = await startReceiver(() => "");
  let worker: ReturnType<typeof startWebhooksWorker> | undefined;
  try {
    const { id } = await newEndpoint(a.apiKey, receiver.url, true);
    await emitMany(a.accountId, 2);
    // The head recorded as sent by a worker that died before bringing the next forward.
    const [head] = await db.delete(webhookDue).where(eq(webhookDue.endpointId, id)).returning();
    await db.update(webhookDeliveries).set({ status: "succeeded" }).where(eq(webhookDeliveries.id, head!.deliveryId));
    worker = startWebhooksWorker({ concurrency: 2, sweepIntervalMs: 300 });
    const got = await until(
      () => receiver.received,
      (list) => list.length >= 1,
    );
    expect(got.map((entry) => entry.event.sequence)).toEqual([2]);
    expect(await db.select().from(webhookParked).where(eq(webhookParked.endpointId, id))).toEqual([]);
  } finally {
    await worker?.stop();
    receiver.stop();
  }
}, 30_000);

test("a held attempt that fails after its endpoint was deleted schedules no retry for it", async () => {
  const a = await newAccount();
  const receiver = await startReceiver(() => "");
  // The held attempt fails by its own timeout, some seconds after the delete has committed.
  const restoreConfig = overrideConfig({ webhooks: { timeoutMs: 4_000 } });
  const pump = startLockedPump(2, 60_000);
  try {
    const id = await deleteWhileHeld(a, receiver, pump);
    // The attempt has not ended yet, so what its batch records comes after the delete.
    expect(receiver.hanging()).toBe(1);
    expect(await db.select().from(webhookDeliveries).where(eq(webhookDeliveries.endpointId, id))).toEqual([]);
    // Stopping waits for the attempt to time out and for its batch to record the failure and commit.
    await pump.stop();
    expect(await db.select().from(webhookDue).where(eq(webhookDue.endpointId, id))).toEqual([]);
  } finally {
    await pump.stop();
    restoreConfig();
    receiver.stop();
  }
}, 30_000);

test("the embedded database's pump, stopping, gives back the deliveries it claimed and had not sent", async () => {
  const a = await newAccount();
  const receiver = await startReceiver(() => "");
  const restoreConfig = overrideConfig({ webhooks: { timeoutMs: 1_000 } });
  // The pump the worker runs on PGlite, whose claims are leases written into the rows.
  const worker = startDeliveryPump(2);
  try {
    await endpointFor(a.apiKey, receiver.url);
    receiver.setMode("hang");
    await emitMany(a.accountId, 10);
    worker.wake();
    const rows = () => db.select().from(webhookDeliveries).where(eq(webhookDeliveries.accountId, a.accountId));
    // Two attempts hang at the receiver; the other eight wait, claimed, beside them. The leases alone
    // are not enough to wait for: they are committed before the worker has taken the claim's rows.
    expect(await until(receiver.hanging, (n) => n === 2)).toBe(2);
    expect(
      await until(
        async () => (await rows()).filter((row) => row.leasedUntil !== null).length,
        (n) => n === 10,
      ),
    ).toBe(10);
    await worker.stop();
    const after = await rows();
    const attempted = after.filter((row) => row.attempts > 0);
    expect(attempted.length).toBe(2);
    const givenBack = after.filter((row) => row.attempts === 0);
    expect(givenBack.length).toBe(8);
    expect(givenBack.every((row) => row.status === "pending" && row.leasedUntil === null)).toBe(true);
  } finally {
    restoreConfig();
    receiver.stop();
  }
}, 30_000);
