/**
 * Parley's Redis work on a Redis Cluster (three primaries, three replicas), in this process:
 * each operation that touches several keys runs although a cluster refuses keys of several
 * slots in one script, transaction or pipeline, and pub/sub goes over shard channels.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { randomUUID } from "node:crypto";
import { config, overrideConfig } from "../src/core/config";
import { type RateCheck, RateLeases } from "../src/modules/limits/rate-leases";
import { llhlsKeys, StreamPublisher } from "../src/modules/streaming/llhls/publisher";
import type { RenditionWindow } from "../src/modules/streaming/llhls/window";
import type { Stream } from "../src/modules/streaming/stream";
import { takePeakViewers } from "../src/modules/streaming/viewers";
import { closeClient, closeRedis, createRedis, type RedisClient, redis, redisKey } from "../src/queue/connection";
import { closeQueues, getQueue, QUEUE_NAMES } from "../src/queue/queues";
import { redisPubSub } from "../src/queue/redis-pubsub";
import { startHeartbeat } from "../workers/recorder/heartbeat";
import { type RedisCluster, startRedisCluster } from "./support/redis-cluster";
import { until } from "./support/wait";

let cluster: RedisCluster;
let restore: (() => void) | undefined;
const clients: RedisClient[] = [];

beforeAll(async () => {
  cluster = await startRedisCluster();
  restore = overrideConfig({
    redis: { clusterNodes: cluster.ports.map((port) => ({ host: "127.0.0.1", port })) },
  });
  // Connections made before were to one server: the next ones are to the cluster.
  await closeRedis();
}, 40_000);

afterAll(async () => {
  await closeQueues();
  await Promise.all(clients.map((client) => closeClient(client)));
  await closeRedis();
  restore?.();
  await cluster?.stop();
});

/** The port of the primary holding `key` now. */
const shardOf = (key: string) => cluster.primaryOf(key)!;

test("rate leases of several subjects claimed in one turn are all counted in the cluster", async () => {
  const counters = createRedis("test-limits", { enableOfflineQueue: false, maxRetriesPerRequest: 0 });
  clients.push(counters);
  await until(
    () => counters.status,
    (status) => status === "ready",
    10_000,
    20,
  );
  const leases = new RateLeases(() => counters);
  const checks: RateCheck[] = Array.from({ length: 6 }, () => ({
    name: "test.cluster",
    key: randomUUID(),
    points: 10,
    windowSeconds: 60,
    per: "test",
  }));
  // Taken in one turn: one batch of claims, for subjects whose counters are on different shards.
  const counted = await Promise.all(checks.map((check) => leases.take(check, Date.now())));
  expect(counted.map((answer) => answer?.allowed)).toEqual(checks.map(() => true));
  const keys = checks.map((check) => `${redisKey("limits", check.name)}:{${check.key}}`);
  expect(new Set(keys.map(shardOf)).size).toBeGreaterThan(1);
  // Counted in Redis, not in this process's memory (where a refused claim would have left them).
  expect(await Promise.all(keys.map((key) => redis().get(key)))).toEqual(keys.map(() => "1"));
});

test("a queued job's keys are all on one slot, under BullMQ's hash-tagged prefix", async () => {
  const queue = await getQueue(QUEUE_NAMES.recorder);
  const tag = `{${config.redis.keyPrefix}:bull}`;
  expect(queue.opts.prefix).toBe(tag);
  await queue.add("stop", { streamId: randomUUID(), reason: "test" }, { jobId: "cluster-test" });
  expect(await queue.getJobCounts("waiting")).toEqual({ waiting: 1 });
  const keys = cluster.command(shardOf(`${tag}:recorder:wait`), "keys", `${tag}:*`).split("\n");
  expect(keys).toContain(`${tag}:recorder:cluster-test`);
  expect(keys).toContain(`${tag}:recorder:wait`);
});

test("pub/sub goes over shard channels, each subscribed on the shard of its slot", async () => {
  const heard: string[] = [];
  const names = Array.from({ length: 4 }, (_, i) => `cluster-test-${i}`);
  const subscription = redisPubSub.subscribe("test-subscription", names, (channel, message) =>
    heard.push(`${channel} ${message}`),
  );
  await subscription.ready;
  expect(new Set(names.map((name) => shardOf(redisKey(name)))).size).toBeGreaterThan(1);
  for (const name of names) await redisPubSub.publish(name, "hello");
  expect(
    await until(
      () => heard.length,
      (n) => n === names.length,
      5_000,
      20,
    ),
  ).toBe(names.length);
  expect(heard.sort()).toEqual(names.map((name) => `${name} hello`));
  const listed = cluster.ports.flatMap((port) =>
    cluster.command(port, "pubsub", "shardchannels", redisKey("cluster-test-*")).split("\n"),
  );
  expect(listed.filter(Boolean).sort()).toEqual(names.map((name) => redisKey(name)));
  await subscription.close();
});

test("an LL-HLS stream's parts, window and doorbell go in one pipeline on the stream's slot", async () => {
  const stream = `cluster-${randomUUID()}`;
  const doorbell = createRedis("test-doorbell");
  clients.push(doorbell);
  const rung: string[] = [];
  doorbell.on("smessage", (_channel: string, message: string) => rung.push(message));
  await doorbell.ssubscribe(redisKey(llhlsKeys.doorbell(stream)));
  const publisher = new StreamPublisher(stream, [{ name: "v0", bandwidth: 1_000_000 }]);
  publisher.chunk("v0", 3, 0, Buffer.from("part bytes"));
  // The publisher stores the window as JSON, whatever it holds.
  publisher.window("v0", { parts: [] } as unknown as RenditionWindow);
  expect(
    await until(
      () => rung.length,
      (n) => n === 2,
      5_000,
      20,
    ),
  ).toBe(2);
  expect(rung).toEqual(["v0 3.0 10", "v0 w"]);
  const part = llhlsKeys.part(stream, "v0", 3, 0);
  expect(await redis().get(part)).toBe("part bytes");
  expect(await redis().get(llhlsKeys.window(stream, "v0"))).toBe(JSON.stringify({ parts: [] }));
  expect(shardOf(part)).toBe(shardOf(llhlsKeys.renditions(stream)));
});

test("a stream's viewer set and peak are taken in one transaction on the stream's slot", async () => {
  const streamName = `cluster-${randomUUID()}`;
  const viewers = redisKey("stream", `{${streamName}}`, "viewers");
  const peak = redisKey("stream", `{${streamName}}`, "peak");
  await redis().sadd(viewers, "a", "b");
  await redis().set(peak, "2");
  // Only the stream's name is read.
  expect(await takePeakViewers({ streamName } as Stream)).toBe(2);
  expect(await redis().exists(viewers)).toBe(0);
  expect(await redis().ttl(peak)).toBeGreaterThan(0);
});

test("a recorder's heartbeat and its room report leave in one transaction on the recorders' slot", async () => {
  const pod = `cluster-${randomUUID()}`;
  const heartbeat = await startHeartbeat(pod, "host", () => ({ units: 1, slots: 2, budget: 3 }));
  const mark = redisKey("{recorder}", "pod", pod);
  const room = redisKey("{recorder}", "room");
  expect(await redis().exists(mark)).toBe(1);
  expect(await redis().hget(room, pod)).toBe("1 2 3");
  await heartbeat.stop();
  expect(await redis().exists(mark)).toBe(0);
  expect(await redis().hget(room, pod)).toBeNull();
});
