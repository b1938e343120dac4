/**
 * How webhooks workers share the deliveries they claim from the database: two workers on
 * one backlog send each delivery once, and a worker that stops gives back what it had
 * claimed but not yet sent, so it is due again at once with no attempt counted.
 */
import { expect, test } from "bun:test";
import { eq } from "drizzle-orm";
import { overrideConfig } from "../../src/config";
import { db } from "../../src/db/client";
import { recordEvent } from "../../src/modules/webhooks/outbox";
import { webhookDeliveries } from "../../src/modules/webhooks/schema";
import { startWebhooksWorker } from "../../workers/webhooks";
import { call, newAccount } from "../helpers";
import { until } from "../support/wait";
import { startReceiver } from "../support/webhook-receiver";

async function emitMany(accountId: string, count: number) {
  await db.transaction(async (tx) => {
    for (let i = 0; i < count; i++)
      await recordEvent(tx, accountId, "reservation.deleted", { reservation_id: i, room: `pump-${i}` });
  });
}

async function endpointFor(apiKey: string, url: string) {
  const created = await call("POST", "/api/v1/webhooks", {
    headers: { authorization: `Bearer ${apiKey}` },
    body: { url },
  });
  expect(created.status).toBe(201);
  return created.body.secret as string;
}

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

test("a stopping worker gives back the deliveries it claimed and had not sent", async () => {
  const a = await newAccount();
  const receiver = await startReceiver(() => "");
  const restoreConfig = overrideConfig({ webhooks: { timeoutMs: 1_000 } });
  const worker = startWebhooksWorker({ concurrency: 2, sweepIntervalMs: 200 });
  try {
    await endpointFor(a.apiKey, receiver.url);
    receiver.setMode("hang");
    await emitMany(a.accountId, 10);
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
