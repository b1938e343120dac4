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
import { overrideConfig } from "../../src/core/config";
import { db } from "../../src/db/client";
import { optionsOf } from "../../src/modules/streaming/request";
import { streams } from "../../src/modules/streaming/schema";
import { redis as sharedRedis } from "../../src/queue/connection";
import { startHeartbeat } from "../../workers/recorder/heartbeat";
import { newAccount } from "../helpers";
import { type PrivateRedis, privateRedis } from "../support/redis-server";
import { until } from "../support/wait";

const entry = new URL("../../src/index.ts", import.meta.url).pathname;
/** STREAMING_RECORDER_LOST_MS of the judging worker. */
const LOST_MS = 2_500;
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

  // live-pod's worker beats as workers do, three times per LOST_MS; silent-pod's never does.
  const beatFor = (client: Redis) => () =>
    client.set(`${prefix}:recorder:pod:live-pod`, "another-host", "PX", LOST_MS).catch(() => "");
  beats = new Redis(redis.url);
  await beatFor(beats)();
  beating = setInterval(beatFor(beats), (LOST_MS * 3) / 10);

  worker = spawn([process.execPath, entry, "--role=recorder"], {
    env: {
      ...process.env,
      LOG_LEVEL: "silent",
      REDIS_URL: redis.url,
      REDIS_PREFIX: prefix,
      STREAMING_RECORDER_DRIVER: "command",
      STREAMING_RECORDER_COMMAND: "echo ready; exec sleep 60",
      STREAMING_POD_NAME: "judging-pod",
      // The production periods scaled down together (10 s by default): every step below keeps
      // its place relative to the worker's beats and reconciliations.
      STREAMING_RECORDER_LOST_MS: String(LOST_MS),
    },
    stdout: "ignore",
    stderr: "inherit",
  });
  // A worker that starts judges at once: the silent worker's stream is finished.
  const finished = await until(
    () => state(silent),
    (row) => row.state !== "running",
    15_000,
    100,
  );
  expect(finished).toMatchObject({ state: "failed", reason: "recorder_lost" });

  // Redis dies for longer than a reconciliation period, so the judging worker's beats fail and
  // it reconciles at least once during the outage; then Redis comes back empty.
  clearInterval(beating);
  beats.disconnect();
  await redis.kill();
  await Bun.sleep(LOST_MS + 300);
  await redis.start();
  beats = new Redis(redis.url);
  // The judging worker is back once its own beat is in Redis again.
  const judgeBack = await until(
    () => beats!.exists(`${prefix}:recorder:pod:judging-pod`),
    (found) => found === 1,
    15_000,
    20,
  );
  expect(judgeBack).toBe(1);
  // live-pod's worker is slower to reconnect: it beats again 60 % of LOST_MS after the judge,
  // long enough for a reconciliation to fall in between, short of the LOST_MS the judge
  // must wait, which leaves a second for this beat to land.
  await Bun.sleep((LOST_MS * 6) / 10);
  await beatFor(beats)();
  beating = setInterval(beatFor(beats), (LOST_MS * 3) / 10);
  // Until the judge may judge again (LOST_MS after its beat came back) and one reconciliation
  // period more, so at least one reconciliation judges live-pod with its heartbeat back.
  await Bun.sleep((LOST_MS * 4) / 10 + LOST_MS + 500);
  expect(await state(live)).toMatchObject({ state: "running" });
  expect(worker.exitCode).toBeNull();
}, 75_000);

test("Redis lost between two beats pauses the judging as a failed beat does", async () => {
  // Beats every 0.9 s: the connection below is gone and back within a few tens of ms, between two.
  const restore = overrideConfig({ streaming: { lostAfterMs: 3_000 } });
  const heartbeat = await startHeartbeat(`between-beats-${randomUUID().slice(0, 8)}`, "this-host", () => ({
    units: 0,
    slots: 0,
    budget: 0,
  }));
  const killer = new Redis(process.env.REDIS_URL!);
  try {
    expect(heartbeat.othersJudgeable()).toBe(true);
    // Only this process's own command connection is cut (as a failover or a quick restart cuts it).
    const closed = new Promise((resolve) => sharedRedis().once("close", resolve));
    await killer.client("KILL", "ID", String(await sharedRedis().client("ID")));
    await closed;
    await until(
      () => sharedRedis().status,
      (status) => status === "ready",
      5_000,
      10,
    );
    expect(heartbeat.othersJudgeable()).toBe(false);
    // Judging again once its beats have gone through for a whole LOST_MS.
    expect(
      await until(
        () => heartbeat.othersJudgeable(),
        (judgeable) => judgeable,
        10_000,
        50,
      ),
    ).toBe(true);
  } finally {
    killer.disconnect();
    await heartbeat.stop();
    restore();
  }
});
