/**
 * The recorder worker: takes start and stop jobs from the BullMQ `recorder` queue and runs
 * up to STREAMING_CAPACITY recorders at once. More workers on more machines scale it out.
 *
 * - A start job launches a recorder and completes once it publishes; the stream then lives
 *   in this process (its row names this pod) until stopped, emptied or failed.
 * - A stop job may land on any worker: the owner stops its recorder itself; any other
 *   worker relays the stop to the owner over Redis, or, when the owner is gone, finishes the
 *   stream on its behalf.
 * - Participant events keep a live occupant set per room in Redis; a stream stops once its
 *   room has stayed empty for the reconnect window.
 * - Reconciliation fails streams whose worker stopped heart-beating and kills their
 *   recorder if it runs on this machine.
 */
import { createReadStream, existsSync, mkdirSync, readFileSync, statSync, unlinkSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { DelayedError, type Job, Worker } from "bullmq";
import type { Redis } from "ioredis";
import { config } from "../src/config";
import { log } from "../src/core/log";
import { EVENT_CHANNEL } from "../src/modules/events/service";
import { RECONNECT_WINDOW_UNIT_MS } from "../src/modules/streaming/schema";
import {
  claimStream,
  finishStream,
  getStream,
  LIVE_STATES,
  liveStreams,
  markRunning,
  recordingObjectKey,
  type Stream,
  wantsRecording,
} from "../src/modules/streaming/service";
import { redis, redisKey, withinRedis } from "../src/queue/connection";
import { pubsub } from "../src/queue/pubsub";
import { closeWorker, QUEUE_NAMES, queueOptions, RECORDER_JOBS, type RecorderStartJob, type RecorderStopJob } from "../src/queue/queues";
import type { Running } from "../src/core/lifecycle";
import { objects } from "../src/storage/objects";
import type { RecorderDriver, RecorderProcess } from "./recorder/driver";
import { driverFromConfig } from "./recorder/index";

const HEARTBEAT_MS = 3_000;
/** A worker silent this long is gone; its streams are reconciled. */
const HEARTBEAT_TTL_MS = 10_000;
const RECONCILE_EVERY_MS = 10_000;

interface LocalRecorder {
  stream: Stream;
  recorder: RecorderProcess;
  recordingPath?: string;
  stopping?: Promise<void>;
  emptyTimer?: ReturnType<typeof setTimeout>;
}

const podKey = (pod: string) => redisKey("recorder", "pod", pod);
/** The channel (core/pubsub) a worker takes stops relayed to its own streams on. */
const podCommands = (pod: string) => `recorder:pod:${pod}:stop`;
const occupantsKey = (accountId: string, room: string) => redisKey("room", accountId, room, "occupants");

/** Fails while Redis is away rather than waiting for it: an answer from a Redis that came back empty would say every worker is dead. */
async function podAlive(pod: string): Promise<boolean> {
  return (await withinRedis(redis(), "reading a recorder heartbeat", () => redis().exists(podKey(pod)))) === 1;
}

function recordingPathOf(stream: Stream): string {
  return join(config.streaming.recordingDir, `${stream.id}.mp4`);
}

/** Uploads the stream's MP4 and deletes the local copy; answers the object key, or undefined when there is nothing to keep. */
async function uploadRecording(stream: Stream, path: string): Promise<string | undefined> {
  if (!existsSync(path)) return undefined;
  const size = statSync(path).size;
  if (size === 0) {
    unlinkSync(path);
    return undefined;
  }
  if (!objects.configured()) {
    log.warn({ stream: stream.streamName, path }, "recording kept on disk: object storage is not configured");
    return undefined;
  }
  const key = recordingObjectKey(stream);
  await objects.put(key, createReadStream(path), { contentLength: size, contentType: "video/mp4" });
  unlinkSync(path);
  log.info({ stream: stream.streamName, bytes: size }, "recording uploaded");
  return key;
}

/** True when `pid` still runs the recorder of this stream (not a recycled pid). */
function runsStream(pid: number, stream: Stream): boolean {
  try {
    const commandLine = readFileSync(`/proc/${pid}/cmdline`, "utf8");
    return commandLine.includes(stream.streamName) || readFileSync(`/proc/${pid}/environ`, "utf8").includes(stream.streamName);
  } catch {
    return false;
  }
}

export interface RecorderWorker extends Running {
  podName: string;
  /** Streams this worker runs right now. */
  active(): string[];
}

export async function startRecorderWorker(driver: RecorderDriver = driverFromConfig()): Promise<RecorderWorker> {
  const pod = config.streaming.podName;
  const host = hostname();
  const local = new Map<string, LocalRecorder>();
  let reserved = 0;
  let closing = false;
  mkdirSync(config.streaming.recordingDir, { recursive: true });

  /**
   * From when this worker may take another for dead by its missing heartbeat: at once on start,
   * as before. Once its own heartbeat has failed (Redis away; a Redis restarted empty has lost
   * every worker's heartbeat), only after its beats have gone through again for a whole
   * HEARTBEAT_TTL_MS, by which time every live worker has beaten again.
   */
  let judgeFrom: number | undefined = Date.now();
  const beat = async () => {
    try {
      await withinRedis(redis(), "recorder heartbeat", () => redis().set(podKey(pod), host, "PX", HEARTBEAT_TTL_MS));
      judgeFrom ??= Date.now() + HEARTBEAT_TTL_MS;
    } catch (error) {
      if (judgeFrom !== undefined) log.warn({ err: (error as Error).message }, "recorder heartbeat failed; no other worker is judged lost until it is back");
      judgeFrom = undefined;
    }
  };
  const othersJudgeable = () => judgeFrom !== undefined && Date.now() >= judgeFrom;
  await beat();
  const heartbeat = setInterval(() => void beat(), HEARTBEAT_MS);

  /** Stops a recorder of this worker, keeps its recording, and finishes its stream. */
  function stopLocal(entry: LocalRecorder, state: "stopped" | "failed", reason: string): Promise<void> {
    entry.stopping ??= (async () => {
      clearTimeout(entry.emptyTimer);
      await entry.recorder.stop(config.streaming.stopGraceMs);
      local.delete(entry.stream.id);
      await keepAndFinish(entry, state, reason);
    })();
    return entry.stopping;
  }

  async function keepAndFinish(entry: LocalRecorder, state: "stopped" | "failed", reason: string): Promise<void> {
    const current = await getStream(entry.stream.id);
    let key: string | undefined;
    if (entry.recordingPath) {
      // A stream given up before it ran (start timeout) has nothing worth keeping.
      if (current?.startedAt) key = await uploadRecording(entry.stream, entry.recordingPath).catch((error: Error) => {
        log.error({ stream: entry.stream.streamName, err: error.message }, "recording upload failed; kept on disk");
        return undefined;
      });
      else if (existsSync(entry.recordingPath)) unlinkSync(entry.recordingPath);
    }
    await finishStream(entry.stream.id, LIVE_STATES, state, reason, key);
    log.info({ stream: entry.stream.streamName, state, reason }, "stream finished");
  }

  async function start(job: Job<RecorderStartJob>, token: string | undefined): Promise<void> {
    const stream = await getStream(job.data.streamId);
    if (stream?.state !== "starting" || local.has(stream.id)) return;
    if (local.size + reserved >= config.streaming.capacity) {
      // Full: hand the job back so a worker with room can take it (the request gives up after 30 s).
      await job.moveToDelayed(Date.now() + 500, token);
      throw new DelayedError();
    }
    reserved++;
    try {
      const s = config.streaming;
      const recordingPath = wantsRecording(stream.options) ? recordingPathOf(stream) : undefined;
      const recorder = driver.start({
        streamId: stream.id,
        streamName: stream.streamName,
        room: stream.room,
        accountId: stream.accountId,
        options: stream.options,
        ingestUrl: `${s.rtmpIngestUrl}/${stream.streamName}`,
        lowLatencyIngestUrl: stream.options.isLowLatency ? `${s.llhlsIngestUrl}/${stream.streamName}` : undefined,
        destinations: job.data.destinations,
        recordingPath,
      });
      const entry: LocalRecorder = { stream, recorder, recordingPath };
      local.set(stream.id, entry);
      recorder.exited.then((exit) => {
        if (entry.stopping || closing) return;
        // The recorder died on its own: the stream failed (it is not restarted; a new start makes a new stream).
        local.delete(stream.id);
        entry.stopping = keepAndFinish(entry, "failed", `recorder_exited: ${exit.detail}`).catch((error: Error) =>
          log.error({ stream: stream.streamName, err: error.message }, "could not finish a failed stream"),
        );
      });
      if (!(await claimStream(stream.id, { podName: pod, host, pid: recorder.pid }))) {
        await stopLocal(entry, "stopped", "requested");
        return;
      }
      const started = await Promise.race([
        recorder.ready.then(() => true),
        recorder.exited.then(() => false),
        Bun.sleep(s.operationTimeoutMs).then(() => false),
      ]);
      if (!started) {
        if (!entry.stopping) await stopLocal(entry, "failed", "start_timeout");
        return;
      }
      if (!(await markRunning(stream.id))) {
        // The request gave up (timeout) or a stop came first: either way this recorder must go.
        const now = await getStream(stream.id);
        await stopLocal(entry, now?.state === "failed" ? "failed" : "stopped", now?.reason ?? "requested");
        return;
      }
      entry.stream = (await getStream(stream.id)) ?? stream;
      await checkOccupancy(entry);
      log.info({ stream: stream.streamName, pod, driver: driver.name }, "stream running");
    } finally {
      reserved--;
    }
  }

  async function stop(job: Job<RecorderStopJob>): Promise<void> {
    const { streamId, reason } = job.data;
    const mine = local.get(streamId);
    if (mine) return stopLocal(mine, "stopped", reason);
    const stream = await getStream(streamId);
    if (!stream || !LIVE_STATES.includes(stream.state)) return;
    if (stream.podName && stream.podName !== pod && (await podAlive(stream.podName))) {
      await pubsub().publish(podCommands(stream.podName), JSON.stringify({ streamId, reason }));
      const deadline = Date.now() + config.streaming.operationTimeoutMs;
      while (Date.now() < deadline) {
        const now = await getStream(streamId);
        if (!now || !LIVE_STATES.includes(now.state)) return;
        await Bun.sleep(200);
      }
      throw new Error("the recorder that owns the stream did not stop it in time");
    }
    await finishOrphan(stream, "stopped", reason);
  }

  /** Finishes a stream whose recorder is gone, keeping whatever it recorded on this machine. */
  async function finishOrphan(stream: Stream, state: "stopped" | "failed", reason: string): Promise<void> {
    if (stream.host === host && stream.pid && stream.pid > 0 && runsStream(stream.pid, stream)) {
      try {
        process.kill(-stream.pid, "SIGKILL");
      } catch {
        // Already gone.
      }
    }
    const path = recordingPathOf(stream);
    const key = stream.startedAt && stream.host === host ? await uploadRecording(stream, path).catch(() => undefined) : undefined;
    await finishStream(stream.id, LIVE_STATES, state, reason, key);
    log.warn({ stream: stream.streamName, previousPod: stream.podName, state, reason }, "stream finished for a lost recorder");
  }

  async function reconcile(): Promise<void> {
    for (const stream of await liveStreams()) {
      if (local.has(stream.id)) continue;
      if (stream.podName === null) {
        // Still queued: its request gives up on its own after the operation timeout.
        if (Date.now() - stream.createdAt.getTime() < config.streaming.operationTimeoutMs * 2) continue;
      } else if (stream.podName !== pod && (!othersJudgeable() || (await podAlive(stream.podName)))) {
        continue;
      }
      await finishOrphan(stream, "failed", "recorder_lost");
    }
  }

  // ------------------------------------------------------------ reconnect window

  async function checkOccupancy(entry: LocalRecorder): Promise<void> {
    const key = occupantsKey(entry.stream.accountId, entry.stream.room);
    const [known, occupants] = await Promise.all([redis().exists(key, `${key}:seen`), redis().scard(key)]);
    clearTimeout(entry.emptyTimer);
    entry.emptyTimer = undefined;
    // A room nobody was ever seen in (no participant events at all) is not "empty": it is unknown.
    if (known === 0 || occupants > 0 || entry.stopping) return;
    const windowMs = entry.stream.options.reconnectWindow * RECONNECT_WINDOW_UNIT_MS;
    entry.emptyTimer = setTimeout(() => {
      void (async () => {
        if ((await redis().scard(key)) > 0 || entry.stopping) return;
        await stopLocal(entry, "stopped", "room_empty");
      })().catch((error: Error) => log.error({ stream: entry.stream.streamName, err: error.message }, "reconnect window stop failed"));
    }, windowMs);
  }

  async function onConferenceEvent(message: string): Promise<void> {
    const event = JSON.parse(message) as { accountId: string; kind: string; room: string; subject?: string };
    if (!["occupant_joined", "occupant_left", "room_destroyed"].includes(event.kind)) return;
    const key = occupantsKey(event.accountId, event.room);
    // Every worker applies every event; the set operations are idempotent, so that is harmless.
    const pipeline = redis().multi();
    if (event.kind === "occupant_joined" && event.subject) pipeline.sadd(key, event.subject);
    else if (event.kind === "occupant_left" && event.subject) pipeline.srem(key, event.subject);
    else if (event.kind === "room_destroyed") pipeline.del(key);
    pipeline.set(`${key}:seen`, "1", "EX", 86_400).expire(key, 86_400);
    await pipeline.exec();
    for (const entry of local.values()) {
      if (entry.stream.accountId === event.accountId && entry.stream.room === event.room && entry.stream.state === "running") {
        await checkOccupancy(entry);
      }
    }
  }

  const subscription = pubsub().subscribe("recorder-events", [EVENT_CHANNEL, podCommands(pod)], (channel, message) => {
    const work = channel === EVENT_CHANNEL ? onConferenceEvent(message) : relayedStop(message);
    work.catch((error: Error) => log.error({ err: error.message }, "recorder message failed"));
  });
  await subscription.ready;

  async function relayedStop(message: string): Promise<void> {
    const { streamId, reason } = JSON.parse(message) as RecorderStopJob;
    const entry = local.get(streamId);
    if (entry) await stopLocal(entry, "stopped", reason);
  }

  const workerOptions = queueOptions();
  const worker = new Worker(
    QUEUE_NAMES.recorder,
    async (job: Job, token?: string) => {
      if (job.name === RECORDER_JOBS.start) return start(job as Job<RecorderStartJob>, token);
      if (job.name === RECORDER_JOBS.stop) return stop(job as Job<RecorderStopJob>);
      throw new Error(`unknown recorder job ${job.name}`);
    },
    // Jobs, not streams: a start job ends once its recorder publishes, and a relayed stop
    // may wait on another worker, so a few run side by side; STREAMING_CAPACITY bounds streams.
    { ...workerOptions, concurrency: 8 },
  );
  worker.on("failed", (job, error) => log.warn({ job: job?.name, err: error.message }, "recorder job failed"));
  worker.on("error", (error) => log.error({ err: error.message }, "recorder worker error"));

  await reconcile().catch((error: Error) => log.error({ err: error.message }, "reconciliation failed"));
  const reconciler = setInterval(
    () => void reconcile().catch((error: Error) => log.error({ err: error.message }, "reconciliation failed")),
    RECONCILE_EVERY_MS,
  );
  log.info({ pod, driver: driver.name, capacity: config.streaming.capacity }, "recorder worker ready");

  return {
    podName: pod,
    active: () => [...local.keys()],
    async stop() {
      clearInterval(reconciler);
      await closeWorker(worker, workerOptions.connection as Redis);
      // Shutting down ends this worker's streams cleanly, recordings kept, rather than orphaning them.
      await Promise.all([...local.values()].map((entry) => stopLocal(entry, "stopped", "recorder_shutdown")));
      closing = true;
      clearInterval(heartbeat);
      // Without Redis the mark expires by itself (HEARTBEAT_TTL_MS).
      await withinRedis(redis(), "removing the heartbeat", () => redis().del(podKey(pod))).catch(() => 0);
      await subscription.close();
    },
  };
}

