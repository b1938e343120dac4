/**
 * A Redis that comes back empty has lost every recorder worker's heartbeat. A worker must not
 * take the others for dead before they have had time to beat again: it would finish their
 * running streams as `recorder_lost` (and kill their recorders on its own machine). A worker
 * that really stopped beating is still found.
 */
import { afterAll, expect, test } from "bun:test";
import { randomUUID } from "node:crypto";
import { type Subprocess, spawn } from "bun";
import { eq } from "drizzle-orm";
import { Redis } from "ioredis";
import { db } from "../../src/db/client";
import { optionsOf } from "../../src/modules/streaming/request";
import { streams } from "../../src/modules/streaming/schema";
import { newAccount } from "../helpers";
import { type PrivateRedis, privateRedis } from "../support/redis-server";
import { until } from "../support/wait";

const entry = new URL("../../src/index.ts", import.meta.url).pathname;
let redis: PrivateRedis | undefined;
let worker: Subprocess | undefined;
let beats: Redis | undefined;
let beating: ReturnType<typeof setInterval> | undefined;

afterAll(async () => {
  clearInterval(beating);
  beats?.disconnect();
  worker?.kill("SIGKILL");
  await worker?.exited;
  await redis?.kill();
});

test("after Redis returns empty, a live worker's streams are kept; a silent worker's are finished", async () => {
  redis = await privateRedis();
  const prefix = `parley-test-beats-${randomUUID()}`;
  const { accountId } = await newAccount();
  const running = async (pod: string) => {
    const name = `${pod}-${randomUUID().slice(0, 8)}`;
    const [row] = await db
      .insert(streams)
      .values({
        id: randomUUID(),
        accountId,
        room: name,
        streamName: name,
        state: "running",
        options: optionsOf({ room_name: name }),
        podName: pod,
        // Another machine: nothing is killed here, only the row is at stake.
        host: "another-host",
        pid: 0,
        startedAt: new Date(),
      })
      .returning();
    return row!.id;
  };
  const state = async (id: string) => (await db.select().from(streams).where(eq(streams.id, id)))[0]!;
  const live = await running("live-pod");
  const silent = await running("silent-pod");

  // live-pod's worker beats every 3 s, as workers do; silent-pod's never does.
  const beatFor = (client: Redis) => () =>
    client.set(`${prefix}:recorder:pod:live-pod`, "another-host", "PX", 10_000).catch(() => "");
  beats = new Redis(redis.url);
  await beatFor(beats)();
  beating = setInterval(beatFor(beats), 3_000);

  worker = spawn([process.execPath, entry, "--role=recorder"], {
    env: {
      ...process.env,
      LOG_LEVEL: "silent",
      REDIS_URL: redis.url,
      REDIS_PREFIX: prefix,
      STREAMING_RECORDER_DRIVER: "command",
      STREAMING_RECORDER_COMMAND: "echo ready; exec sleep 60",
      STREAMING_POD_NAME: "judging-pod",
    },
    stdout: "ignore",
    stderr: "inherit",
  });
  // A worker that starts judges at once: the silent worker's stream is finished.
  const finished = await until(
    () => state(silent),
    (row) => row.state !== "running",
    15_000,
    250,
  );
  expect(finished).toMatchObject({ state: "failed", reason: "recorder_lost" });

  // Redis dies and comes back empty after 11 s, so the judging worker reconciles (every 10 s)
  // at least once during the outage; live-pod's worker beats again 4 s after Redis is back
  // (its reconnection and next beat).
  clearInterval(beating);
  beats.disconnect();
  await redis.kill();
  await Bun.sleep(11_000);
  await redis.start();
  await Bun.sleep(4_000);
  beats = new Redis(redis.url);
  await beatFor(beats)();
  beating = setInterval(beatFor(beats), 3_000);
  // Two more reconciliations, with the heartbeat back.
  await Bun.sleep(12_000);
  expect(await state(live)).toMatchObject({ state: "running" });
  expect(worker.exitCode).toBeNull();
}, 75_000);
