/**
 * Nothing acknowledged lives only in Redis: with the webhooks worker's Redis killed, the
 * deliveries recorded in PostgreSQL are still sent, by the worker's sweep, each verified
 * with `standardwebhooks`.
 */
import { expect, test } from "bun:test";
import { spawn } from "bun";
import { db } from "../../src/db/client";
import { recordEvent } from "../../src/modules/webhooks/outbox";
import { call, newAccount } from "../helpers";
import { privateRedis } from "../support/redis-server";
import { until } from "../support/wait";
import { startReceiver } from "../support/webhook-receiver";

test("with the worker's Redis gone, its sweep sends every recorded delivery", async () => {
  const redis = await privateRedis();
  let secret = "";
  const receiver = await startReceiver(() => secret);
  const child = spawn([process.execPath, "test/support/webhooks-worker-process.ts"], { stdout: "pipe", stderr: "ignore", env: { ...process.env, REDIS_URL: redis.url } });
  try {
    const { value } = await child.stdout.getReader().read();
    expect(new TextDecoder().decode(value)).toContain("ready");
    await redis.kill();
    const a = await newAccount();
    const created = await call("POST", "/api/v1/webhooks", { headers: { authorization: `Bearer ${a.apiKey}` }, body: { url: receiver.url } });
    secret = created.body.secret;
    for (let i = 0; i < 10; i++) {
      await db.transaction((tx) => recordEvent(tx, a.accountId, "reservation.deleted", { reservation_id: i, room: `no-redis-${i}` }));
    }
    const unique = await until(() => receiver.unique(), (list) => list.length >= 10, 20_000);
    expect(unique.length).toBe(10);
    expect(unique.every((entry) => entry.verified)).toBe(true);
    expect(unique.map((entry) => entry.event.data.reservation_id).sort((x, y) => x - y)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
  } finally {
    child.kill("SIGKILL");
    await child.exited;
    receiver.stop();
    await redis.kill();
  }
}, 60_000);
