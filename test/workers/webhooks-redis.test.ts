/**
 * Nothing acknowledged lives only in Redis: with the webhooks worker's Redis killed, the
 * deliveries recorded in PostgreSQL are still sent, by the worker's sweep, each verified
 * with `standardwebhooks`. And the webhooks worker keeps the outbox's contract.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { spawn } from "bun";
import { sql } from "drizzle-orm";
import { db } from "../../src/db/client";
import { rowsOf } from "../../src/db/rows";
import { recordEvent, recordEvents, WEBHOOKS_CONSUMER } from "../../src/modules/catalogue";
import { startWebhooksWorker } from "../../src/modules/webhooks/worker";
import { outboxContract } from "../core/outbox-contract";
import { call, newAccount } from "../helpers";
import { privateRedis } from "../support/redis-server";
import { until } from "../support/wait";
import { startReceiver } from "../support/webhook-receiver";

test("with the worker's Redis gone, its sweep sends every recorded delivery", async () => {
  const redis = await privateRedis();
  let secret = "";
  const receiver = await startReceiver(() => secret);
  const child = spawn([process.execPath, "test/support/webhooks-worker-process.ts"], {
    stdout: "pipe",
    stderr: "ignore",
    env: { ...process.env, REDIS_URL: redis.url },
  });
  try {
    const { value } = await child.stdout.getReader().read();
    expect(new TextDecoder().decode(value)).toContain("ready");
    await redis.kill();
    const a = await newAccount();
    const created = await call("POST", "/api/v1/webhooks", {
      headers: { authorization: `Bearer ${a.apiKey}` },
      body: { url: receiver.url },
    });
    secret = created.body.secret;
    for (let i = 0; i < 10; i++) {
      await db.transaction((tx) =>
        recordEvent(tx, a.accountId, "reservation.deleted", { reservation_id: i, room: `no-redis-${i}` }),
      );
    }
    const unique = await until(
      () => receiver.unique(),
      (list) => list.length >= 10,
      20_000,
    );
    expect(unique.length).toBe(10);
    expect(unique.every((entry) => entry.verified)).toBe(true);
    expect(unique.map((entry) => entry.event.data.reservation_id).sort((x, y) => x - y)).toEqual([
      0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
    ]);
  } finally {
    child.kill("SIGKILL");
    await child.exited;
    receiver.stop();
    await redis.kill();
  }
}, 60_000);

let contract: { accountId: string; receiver: Awaited<ReturnType<typeof startReceiver>> };
let serial = 0;
beforeAll(async () => {
  let secret = "";
  const receiver = await startReceiver(() => secret);
  const a = await newAccount();
  // Ordered: the endpoint takes the account's events one at a time, in sequence.
  const created = await call("POST", "/api/v1/webhooks", {
    headers: { authorization: `Bearer ${a.apiKey}` },
    body: { url: receiver.url, ordered: true },
  });
  secret = created.body.secret;
  contract = { accountId: a.accountId, receiver };
});
afterAll(() => contract.receiver.stop());

const byKey = (facts: Array<{ id: string; key: string }>) => {
  const map = new Map<string, string[]>();
  for (const fact of facts) map.set(fact.key, [...(map.get(fact.key) ?? []), fact.id]);
  return map;
};

outboxContract("webhooks", () => ({
  ordersPerKey: true,
  async record(outbox, key, count, rollBack = false) {
    const data = Array.from({ length: count }, () => ({ reservation_id: ++serial, room: key }));
    await db
      .transaction(async (tx) => {
        await recordEvents(tx, contract.accountId, "reservation.deleted", data);
        outbox.ring(tx, WEBHOOKS_CONSUMER);
        if (rollBack) throw new Error("rolled back");
      })
      .catch((error: Error) => {
        if (!rollBack) throw error;
      });
  },
  start: (outbox, sweepEveryMs) => startWebhooksWorker({ outbox, concurrency: 4, sweepIntervalMs: sweepEveryMs }),
  async recorded() {
    const rows = rowsOf<{ id: string; key: string }>(
      await db.execute(
        sql`select id, data->>'room' as key from events where account_id = ${contract.accountId} order by sequence`,
      ),
    );
    return byKey(rows);
  },
  async handled() {
    return byKey(
      contract.receiver.received
        .filter((entry) => entry.verified)
        .map((entry) => ({ id: entry.event.id, key: entry.event.data.room })),
    );
  },
  // A delivery whose attempt fails midway (the receiver answers 500) is sent again.
  crashNextDrain: () => contract.receiver.setMode("error-once"),
}));
