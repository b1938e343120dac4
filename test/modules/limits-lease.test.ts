/**
 * Leased rate budgets: two counters with their own memory, standing for two API processes,
 * share one budget through one Redis. Together they never admit more than the limit, a busy
 * counter spends most requests from its lease without asking Redis, a window's leftover units
 * are not spent in the next one, and without Redis each counts in its own memory.
 */
import { afterAll, expect, test } from "bun:test";
import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import { type Counted, type RateCheck, RateLeases } from "../../src/modules/limits/rate-leases";
import { privateRedis } from "../support/redis-server";
import { until } from "../support/wait";

const connections: Redis[] = [];
afterAll(() => {
  for (const connection of connections) connection.disconnect();
});

async function connectionTo(port: number): Promise<Redis> {
  const connection = new Redis({
    host: "127.0.0.1",
    port,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    commandTimeout: 250,
  });
  connections.push(connection);
  // Each test kills its Redis; the reconnect attempts after that are expected.
  connection.on("error", () => {});
  await until(
    async () => connection.status,
    (status) => status === "ready",
    5_000,
    20,
  );
  return connection;
}

const check = (points: number, windowSeconds: number): RateCheck => ({
  name: "test.lease",
  key: randomUUID(),
  points,
  windowSeconds,
  per: "test",
});

/** Takes one unit per request, `concurrent` requests at a time; counts those answered without waiting for Redis. */
async function burst(leases: RateLeases, rate: RateCheck, concurrent: number) {
  const taken = Array.from({ length: concurrent }, () => leases.take(rate, Date.now()));
  const local = taken.filter((result) => !(result instanceof Promise)).length;
  const results = (await Promise.all(taken)) as Array<Counted | undefined>;
  return {
    allowed: results.filter((result) => result?.allowed).length,
    refused: results.filter((result) => result && !result.allowed).length,
    local,
  };
}

test("two processes sharing a budget admit exactly the limit; the first refusal is within a lease of it", async () => {
  const redis = await privateRedis();
  try {
    const a = new RateLeases(() => connections[0]!);
    const b = new RateLeases(() => connections[1]!);
    await connectionTo(redis.port);
    await connectionTo(redis.port);
    const points = 4_000;
    const rate = check(points, 30);
    let admitted = 0;
    let local = 0;
    let requests = 0;
    let firstRefusalAfter: number | undefined;
    const refused = { a: false, b: false };
    while (!refused.a || !refused.b) {
      // Both busy at once: each spends its lease while the other claims.
      const [fromA, fromB] = await Promise.all([burst(a, rate, 20), burst(b, rate, 20)]);
      for (const [name, result] of [["a", fromA] as const, ["b", fromB] as const]) {
        admitted += result.allowed;
        local += result.local;
        requests += 20;
        if (result.refused > 0) {
          firstRefusalAfter ??= admitted;
          refused[name] = true;
        }
      }
    }
    expect(admitted).toBe(points);
    // What the other process may hold when one is refused: at most one lease, 1/16 of the limit.
    expect(firstRefusalAfter!).toBeGreaterThanOrEqual(points - points / 16 - 20);
    // Most requests were answered from a lease, without a round trip.
    expect(local / requests).toBeGreaterThan(0.5);
    // Redis's count is what was granted, never past the limit.
    const stored = await connections[0]!.keys("*test.lease*");
    expect(stored.length).toBe(1);
    expect(Number(await connections[0]!.get(stored[0]!))).toBe(points);
  } finally {
    await redis.kill();
  }
}, 30_000);

test("quiet requests lease nothing ahead: a small limit is exact across processes", async () => {
  const redis = await privateRedis();
  try {
    const leases = [new RateLeases(() => connections[2]!), new RateLeases(() => connections[3]!)];
    await connectionTo(redis.port);
    await connectionTo(redis.port);
    const rate = check(6, 30);
    const answers: boolean[] = [];
    for (let i = 0; i < 8; i++) answers.push(((await leases[i % 2]!.take(rate, Date.now())) as Counted).allowed);
    expect(answers).toEqual([true, true, true, true, true, true, false, false]);
  } finally {
    await redis.kill();
  }
});

test("units leased in one window are not spent in the next: per window, never more than the limit", async () => {
  const redis = await privateRedis();
  try {
    const a = new RateLeases(() => connections[4]!);
    const b = new RateLeases(() => connections[5]!);
    await connectionTo(redis.port);
    await connectionTo(redis.port);
    const points = 800;
    const rate = check(points, 1);
    // Admissions by the window Redis counted them in, told apart by the counter's time to live:
    // it grows back when a new window starts.
    const perWindow: number[] = [];
    let lastTtl = Number.POSITIVE_INFINITY;
    let key: string | undefined;
    const deadline = Date.now() + 3_500;
    while (Date.now() < deadline) {
      const [fromA, fromB] = await Promise.all([burst(a, rate, 10), burst(b, rate, 10)]);
      key ??= (await connections[4]!.keys(`*${rate.key}`))[0];
      const ttl = key ? await connections[4]!.pttl(key) : -2;
      if (ttl > lastTtl || ttl < 0 || perWindow.length === 0) perWindow.push(0);
      lastTtl = ttl < 0 ? Number.POSITIVE_INFINITY : ttl;
      perWindow[perWindow.length - 1]! += fromA.allowed + fromB.allowed;
      await Bun.sleep(1);
    }
    expect(perWindow.length).toBeGreaterThanOrEqual(3);
    for (const admitted of perWindow) expect(admitted).toBeLessThanOrEqual(points);
    // Busy windows use their budget: the lease is not what refuses.
    expect(Math.max(...perWindow)).toBeGreaterThan(points - points / 16 - 20);
  } finally {
    await redis.kill();
  }
}, 30_000);

test("without Redis each process counts in its own memory, without waiting", async () => {
  const redis = await privateRedis();
  const leases = new RateLeases(() => connections[6]!);
  await connectionTo(redis.port);
  // A one-second window, the shortest there is: the wait below for its end is the test's.
  const rate = check(3, 1);
  expect(((await leases.take(rate, Date.now())) as Counted).allowed).toBe(true);
  await redis.kill();
  await until(
    async () => connections[6]!.status,
    (status) => status !== "ready",
    5_000,
    20,
  );
  // The lease of the window before the outage ends with it.
  await Bun.sleep(1_100);
  const started = performance.now();
  const answers: boolean[] = [];
  for (let i = 0; i < 5; i++) answers.push(((await leases.take(rate, Date.now())) as Counted).allowed);
  expect(answers).toEqual([true, true, true, false, false]);
  expect(performance.now() - started).toBeLessThan(500);
});
