/**
 * Recording admission under load: more starts than two workers have units for are queued, not
 * refused, and each starts by itself as units free, in priority then each account's turn; none is lost when
 * a worker is killed outright or when the start jobs vanish from Redis. Recorders are the
 * `command` driver (a shell that says ready and sleeps), costs the ones streams declare.
 */
import { afterAll, afterEach, beforeAll, expect, test } from "bun:test";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Subprocess, spawn } from "bun";
import { eq } from "drizzle-orm";
import { config, overrideConfig } from "../../src/core/config";
import { db } from "../../src/db/client";
import { renderMetrics } from "../../src/http/metrics";
import { recorderRoomKey } from "../../src/modules/streaming/recorders";
import { streams } from "../../src/modules/streaming/schema";
import { stopStateSubscriber } from "../../src/modules/streaming/state";
import { redis } from "../../src/queue/connection";
import { getQueue, QUEUE_NAMES } from "../../src/queue/queues";
import { type RecorderWorker, startRecorderWorker } from "../../workers/recorder";
import { commandDriver } from "../../workers/recorder/command";
import { call, newAccount } from "../helpers";
import { until } from "../support/wait";

const out = mkdtempSync(join(tmpdir(), "parley-queue-"));
// Writes down the destinations it was given, says it publishes, runs until stopped.
const RECORDER = `printf '%s' "$PARLEY_DESTINATIONS" > "${out}/$PARLEY_STREAM_NAME.destinations"
echo ready
exec sleep 120`;
const entry = new URL("../../src/index.ts", import.meta.url).pathname;
let restoreConfig: () => void;
const workers: RecorderWorker[] = [];
let child: Subprocess | undefined;

type Account = Awaited<ReturnType<typeof newAccount>>;
const start = (account: Account, room_name: string, extra: Record<string, unknown> = {}) =>
  call("POST", "/terraform/v1/hooks/srs/startRecording", {
    body: { room_name, ...extra },
    headers: { authorization: `Bearer ${account.apiKey}` },
  });
const stop = (account: Account, room_name: string) =>
  call("POST", "/terraform/v1/hooks/srs/stopRecording", {
    body: { room_name },
    headers: { authorization: `Bearer ${account.apiKey}` },
  });
const row = async (streamName: string) =>
  (await db.select().from(streams).where(eq(streams.streamName, streamName)))[0]!;

async function worker(pod: string): Promise<RecorderWorker> {
  const restore = overrideConfig({ streaming: { podName: `${config.streaming.podName}-${pod}` } });
  try {
    const started = await startRecorderWorker(commandDriver(RECORDER));
    workers.push(started);
    return started;
  } finally {
    restore();
  }
}

beforeAll(() => {
  restoreConfig = overrideConfig({
    // Two plain streams (30 units each) per worker; the count cap out of the way.
    streaming: { workerUnits: 60, capacity: 100, recordingDir: join(out, "recordings") },
  });
});

// Every test's workers and recorder process go with it, passed or failed: one left running would
// take the next test's starts.
afterEach(async () => {
  child?.kill("SIGKILL");
  await child?.exited;
  child = undefined;
  for (const w of workers.splice(0)) await w.stop();
});

afterAll(async () => {
  await stopStateSubscriber();
  restoreConfig();
});

test("3× oversubscription on two workers, three accounts, two priorities: priority, then turns", async () => {
  const first = await worker("a");
  const second = await worker("b");
  const [a, b, c] = [await newAccount(), await newAccount(), await newAccount()];
  // Capacity is 4 streams; 13 are offered. The first 4 run; then account a queues three at
  // priority 0 before b and c queue anything, and one of a's is stopped while it waits.
  const plan: [Account, string, number][] = [
    [a, "run-a", 0],
    [b, "run-b", 0],
    [c, "run-c", 0],
    [a, "run-a2", 0],
    [a, "a0", 0],
    [a, "a1", 0],
    [a, "a2", 0],
    [b, "b0", 0],
    [c, "c0", 1],
    [a, "a3", 1],
    [b, "b1", 0],
    [c, "c1", 0],
    [a, "a4", 0],
  ];
  const offered = new Map<string, { account: Account; name: string; status: number; position?: number }>();
  for (const [account, room, priority] of plan) {
    const answer = await start(account, room, { priority });
    expect([200, 202]).toContain(answer.status);
    offered.set(room, {
      account,
      name: answer.body.stream_name,
      status: answer.status,
      position: answer.body.position,
    });
  }
  const rooms = [...offered.keys()];
  expect(rooms.filter((room) => offered.get(room)!.status === 200)).toEqual(["run-a", "run-b", "run-c", "run-a2"]);
  expect(first.active().length).toBe(2);
  expect(second.active().length).toBe(2);
  // c0 is the first of priority 1; c1, c's first at priority 0, is behind the first turn of a and b only.
  expect(offered.get("c0")!.position).toBe(1);
  expect(offered.get("c1")!.position).toBe(5);
  // For autoscalers: each worker's units, the queue's depth by priority.
  const full = await until(
    () => renderMetrics(),
    (text) => [first, second].every((w) => text.includes(`parley_recorder_units_free{pod="${w.podName}"} 0\n`)),
    5_000,
    50,
  );
  for (const w of [first, second]) expect(full).toContain(`parley_recorder_units_used{pod="${w.podName}"} 60\n`);
  expect(full).toContain('parley_recorder_queue_depth{priority="0"} 7\n');
  expect(full).toContain('parley_recorder_queue_depth{priority="1"} 2\n');
  expect(full).toContain('parley_recorder_queue_depth{priority="9"} 0\n');
  // c0 and a3, plain streams: 30 units each.
  expect(full).toContain('parley_recorder_queue_units{priority="1"} 60\n');
  expect(full).toContain("parley_recorder_queue_wait_seconds_count 0\n");
  // A queued start stopped is out of the queue, stopped as asked, never started.
  expect((await stop(a, "a4")).status).toBe(200);
  expect(await row(offered.get("a4")!.name)).toMatchObject({ state: "stopped", reason: "requested", startedAt: null });

  // Stop the running streams one at a time, oldest first: each stop lets the next queued one in.
  const running = ["run-a", "run-b", "run-c", "run-a2"];
  const waiting = new Set(rooms.filter((room) => offered.get(room)!.status === 202 && room !== "a4"));
  const waits: number[] = [];
  const order: string[] = [];
  for (let i = 0; i < running.length; i++) {
    const stopping = offered.get(running[i]!)!;
    expect((await stop(stopping.account, running[i]!)).status).toBe(200);
    const freed = Date.now();
    if (waiting.size === 0) continue;
    const next = await until(
      async () => {
        for (const room of waiting) {
          const stream = await row(offered.get(room)!.name);
          if (stream.state === "running") return { room, stream };
        }
        return undefined;
      },
      (found) => found !== undefined,
      10_000,
      20,
    );
    expect(next).toBeDefined();
    waits.push(next!.stream.startedAt!.getTime() - freed);
    order.push(next!.room);
    running.push(next!.room);
    waiting.delete(next!.room);
    // One unit's worth freed, one stream started: the others still wait.
    for (const room of waiting) expect((await row(offered.get(room)!.name)).state).toBe("queued");
  }
  // Priority 1 first; then at priority 0 every account's first turn (in the order each was
  // queued), then the second turns: c1, queued last, before a's second and third.
  expect(order).toEqual(["c0", "a3", "a0", "b0", "c1", "a1", "b1", "a2"]);
  waits.sort((x, y) => x - y);
  const p95 = waits[Math.ceil(waits.length * 0.95) - 1]!;
  console.log(`queued start after room freed: p50 ${waits[Math.floor(waits.length / 2)]} ms, p95 ${p95} ms`);
  expect(p95).toBeLessThanOrEqual(2_000);
  // Every queued start that ran is in the wait histogram (the one stopped while queued is not).
  const after = await renderMetrics();
  expect(after).toContain("parley_recorder_queue_wait_seconds_count 8\n");
  expect(after).toContain('parley_recorder_queue_wait_seconds_bucket{le="+Inf"} 8\n');
  expect(after).toContain('parley_recorder_queue_depth{priority="0"} 0\n');
  // Nothing lost: every stream offered ended stopped as asked.
  for (const o of offered.values()) expect(await row(o.name)).toMatchObject({ state: "stopped", reason: "requested" });
}, 60_000);

test("a worker that comes with room takes queued streams at once, in the queue's order", async () => {
  const full = await worker("full");
  const [a, b] = [await newAccount(), await newAccount()];
  expect((await start(a, "jobs-run-0")).status).toBe(200);
  expect((await start(a, "jobs-run-1")).status).toBe(200);
  expect(full.active().length).toBe(2);
  const names: Record<string, string> = {};
  for (const [account, room] of [
    [a, "a-first"],
    [a, "a-second"],
    [b, "b-first"],
  ] as const) {
    const answer = await start(account, room);
    expect(answer.status).toBe(202);
    names[room] = answer.body.stream_name;
  }
  // The new worker takes the first queued streams that fit it as it starts; their jobs, offered
  // again every 0.5 s, find them taken or yield to a stream ahead of them.
  const fresh = await worker("fresh-jobs");
  const started = await until(
    async () => Promise.all(["a-first", "b-first"].map(async (room) => (await row(names[room]!)).state)),
    (states) => states.every((state) => state === "running"),
  );
  expect(started).toEqual(["running", "running"]);
  expect(fresh.active().length).toBe(2);
  // a's second turn waits (the new worker is full now), though it was queued before b's first.
  expect((await row(names["a-second"]!)).state).toBe("queued");
  for (const room of ["a-first", "a-second", "jobs-run-0", "jobs-run-1"])
    expect((await stop(a, room)).status).toBe(200);
  expect((await stop(b, "b-first")).status).toBe(200);
}, 30_000);

test("queued starts whose jobs vanished from Redis are offered again, keys and all", async () => {
  // Reconciliation, which makes a lost start job again, runs every STREAMING_RECORDER_LOST_MS.
  const restore = overrideConfig({ streaming: { lostAfterMs: 2_000 } });
  const lostAfterMs = config.streaming.lostAfterMs;
  await worker("full").finally(restore);
  const account = await newAccount();
  expect((await start(account, "lost-0")).status).toBe(200);
  expect((await start(account, "lost-1")).status).toBe(200);
  const queued = await start(account, "lost-2", { stream_keys: [{ key: "youtube", value: "kept-key" }] });
  expect(queued.status).toBe(202);
  // As a Redis restarted empty would: the start job is gone, the row still says queued. A job is
  // not removed while a worker holds it (handing it back), so the removal is tried until it is.
  const jobId = `start-${(await row(queued.body.stream_name)).id}`;
  const queue = await getQueue(QUEUE_NAMES.recorder);
  expect(
    await until(
      () => queue.remove(jobId),
      (removed) => removed === 1,
    ),
  ).toBe(1);
  expect((await row(queued.body.stream_name)).state).toBe("queued");
  // The worker's next reconciliation makes the job again, the keys opened from the row's sealed copy.
  const again = await until(
    () => queue.getJob(jobId),
    (job) => job !== undefined,
    3 * lostAfterMs,
  );
  expect(again?.data.destinations).toEqual(["rtmp://a.rtmp.youtube.com/live2/kept-key"]);
  // A worker with room comes and takes it.
  const fresh = await worker("fresh");
  const running = await until(
    () => row(queued.body.stream_name),
    (stream) => stream.state === "running",
  );
  expect(running.podName).toBe(fresh.podName);
  expect(await Bun.file(join(out, `${running.streamName}.destinations`)).text()).toBe(
    "rtmp://a.rtmp.youtube.com/live2/kept-key",
  );
  for (const room of ["lost-0", "lost-1", "lost-2"]) expect((await stop(account, room)).status).toBe(200);
}, 30_000);

test("a worker whose stream ends says so to the others at once, not at its next beat", async () => {
  // Beats three minutes apart: within this test only the end of a stream can change its report.
  const restore = overrideConfig({ streaming: { lostAfterMs: 600_000 } });
  const told = await worker("told").finally(restore);
  const report = () => redis().hget(recorderRoomKey(), told.podName);
  const account = await newAccount();
  for (const room of ["told-0", "told-1"]) expect((await start(account, room)).status).toBe(200);
  // Units free, slots free, budget: full by units.
  expect(await report()).toBe("0 98 60");
  expect((await stop(account, "told-0")).status).toBe(200);
  // A report left at "full" made another full worker queue a start this one had room for (202, not 200).
  expect(await until(report, (room) => room === "30 99 60")).toBe("30 99 60");
  expect((await stop(account, "told-1")).status).toBe(200);
});

test("a worker killed -9 with streams queued: they start on another, its running one is recorder_lost", async () => {
  const LOST_MS = 1_500;
  const restore = overrideConfig({ streaming: { lostAfterMs: LOST_MS } });
  try {
    const account = await newAccount();
    child = spawn([process.execPath, entry, "--role=recorder"], {
      env: {
        ...process.env,
        LOG_LEVEL: "silent",
        STREAMING_RECORDER_DRIVER: "command",
        STREAMING_RECORDER_COMMAND: RECORDER,
        STREAMING_POD_NAME: `${config.streaming.podName}-doomed`,
        STREAMING_WORKER_UNITS: "30",
        STREAMING_RECORDER_LOST_MS: String(LOST_MS),
        STREAMING_RECORDING_DIR: config.streaming.recordingDir,
      },
      stdout: "ignore",
      stderr: "inherit",
    });
    const running = await until(
      () => start(account, "doomed-0"),
      (answer) => answer.status === 200,
      20_000,
      200,
    );
    expect(running.body.pod_name).toBe(`${config.streaming.podName}-doomed`);
    const queued = [await start(account, "doomed-1"), await start(account, "doomed-2")];
    expect(queued.map((answer) => answer.status)).toEqual([202, 202]);
    child.kill("SIGKILL");
    await child.exited;

    const survivor = await worker("survivor");
    for (const answer of queued) {
      const started = await until(
        () => row(answer.body.stream_name),
        (stream) => stream.state === "running",
        // The survivor takes them from the database as it starts; a job the killed worker held at
        // that instant comes back only once BullMQ finds it stalled (30 s), and is not waited for.
        10_000,
        100,
      );
      expect(started).toMatchObject({ state: "running", podName: survivor.podName });
    }
    const lost = await until(
      () => row(running.body.stream_name),
      (stream) => stream.state === "failed",
      10_000,
      100,
    );
    expect(lost.reason).toBe("recorder_lost");
    for (const room of ["doomed-1", "doomed-2"]) expect((await stop(account, room)).status).toBe(200);
  } finally {
    restore();
  }
}, 90_000);
