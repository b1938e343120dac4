/**
 * What a recorder worker does with its jobs: a start launches a recorder and ends once it
 * publishes, or is handed (core/pubsub) to a worker with room when this one is full; a stop
 * ends the worker's own recorder, is relayed (core/pubsub) to the owner when that is another
 * live worker, or finishes the stream when its owner is gone; and
 * reconciliation finishes the streams of workers that stopped heart-beating.
 * The relay is control: the stop job's command handed on to the one process that can carry
 * it out. Waiting for its result is not: the relaying job waits for the stream's row to
 * leave its live states, woken by the outbox like every waiter of a stream (state.ts).
 */
import { DelayedError, type Job, type Queue } from "bullmq";
import { config } from "../../src/core/config";
import { log } from "../../src/core/log";
import {
  claimStream,
  getStream,
  LIVE_STATES,
  liveStreams,
  markQueued,
  markRunning,
  openDestinations,
  queuedBefore,
  queuedStreams,
  type Room,
  sealDestinations,
  type Stream,
  streamCost,
  takeStream,
  waitForStream,
  wantsRecording,
} from "../../src/modules/streaming";
import {
  enqueue,
  getQueue,
  QUEUE_NAMES,
  RECORDER_JOBS,
  type RecorderStartJob,
  type RecorderStopJob,
  startJobOptions,
} from "../../src/queue/queues";
import { type Heartbeat, otherWithRoom, podAlive, reportRoom } from "./heartbeat";
import { failOnExit, finishOrphan, type LocalRecorder, type RecorderHost, stopLocal } from "./local";
import type { RecorderSpec } from "./driver";
import { packageLowLatency } from "./llhls";
import { checkOccupancy } from "./occupancy";
import { recordingPathOf } from "./recordings";

/**
 * How much longer than the start request the worker waits for its recorder before failing it
 * itself: the request's own deadline decides first (reason `timeout`, answered 504), and the
 * worker's is the backstop for a request that died (reason `start_timeout`). With equal
 * deadlines the two raced on a busy machine and the row's reason was either.
 */
const START_BACKSTOP_MARGIN_MS = 2_000;

/** How soon a start no worker had room for is offered again: the bound on a queued stream's wait once units free. */
const QUEUED_RETRY_MS = 500;

/** How many of the first queued streams a worker whose room freed looks at: a freed stream may make room for a few. */
const TAKE_AT_ONCE = 8;

/** Units this worker's streams and the starts under way hold. */
export function unitsUsed(worker: RecorderHost): number {
  let used = worker.reservedUnits;
  for (const entry of worker.local.values()) used += streamCost(entry.stream.options);
  return used;
}

/** What this worker has free, as reported to the others. */
export function roomOf(worker: RecorderHost): Room {
  const s = config.streaming;
  return {
    units: s.workerUnits - unitsUsed(worker),
    slots: s.capacity - worker.local.size - worker.reserved,
    budget: s.workerUnits,
  };
}

/**
 * Whether a stream ahead of this one in the queue's order (streaming/queue.ts: priority, then
 * each account's turn) would fit this worker's free units: it goes first (its job comes back
 * within QUEUED_RETRY_MS), and a cheaper stream behind one that does not fit may still pass it.
 */
async function earlierFits(worker: RecorderHost, stream: Stream): Promise<boolean> {
  const free = roomOf(worker).units;
  for (const earlier of await queuedBefore(stream)) if (streamCost(earlier.options) <= free) return true;
  return false;
}

/** Whether a stream of `cost` units fits: both the unit budget and STREAMING_CAPACITY leave room. */
function hasRoom(worker: RecorderHost, cost: number): boolean {
  const s = config.streaming;
  return worker.local.size + worker.reserved < s.capacity && unitsUsed(worker) + cost <= s.workerUnits;
}

/** The channel a worker takes stops relayed to its own streams on. */
export const podCommands = (pod: string) => `recorder:pod:${pod}:stop`;

/** The channel a worker takes starts on that a full worker handed it. */
export const podHandOffs = (pod: string) => `recorder:pod:${pod}:start`;

export async function startJob(
  worker: RecorderHost,
  job: Job<RecorderStartJob>,
  token: string | undefined,
): Promise<void> {
  const stream = await getStream(job.data.streamId);
  if ((stream?.state !== "starting" && stream?.state !== "queued") || worker.local.has(stream.id)) return;
  // Claimed already: a worker took it, and this is a job made again meanwhile (reofferQueued).
  if (stream.podName !== null) return;
  const cost = streamCost(stream.options);
  if (!hasRoom(worker, cost) || (await earlierFits(worker, stream))) {
    // No room here. A worker that has room is handed the stream at once: the job handed back
    // reaches whichever worker asks next, and that was this full one again and again for as
    // long as 20 s, the other idle. When no worker has room, the stream is queued and its
    // caller answered at once. Either way the job comes back every QUEUED_RETRY_MS, the
    // backstop for a hand-off lost.
    const other = await otherWithRoom(worker.pod, cost);
    if (other !== undefined) await worker.pubsub.publish(podHandOffs(other), stream.id);
    else if (stream.state === "starting")
      await markQueued(stream.id, job.data.destinations.length > 0 ? sealDestinations(job.data.destinations) : null);
    await job.moveToDelayed(Date.now() + QUEUED_RETRY_MS, token);
    throw new DelayedError();
  }
  await launch(worker, stream, job.data.destinations);
}

/** States of a stream no worker has taken yet. */
const WAITING_STATES: Stream["state"][] = ["starting", "queued"];

/** A start a full worker handed this one: taken when it still waits and fits here, else left to its job. */
export async function handedStart(worker: RecorderHost, streamId: string): Promise<void> {
  const stream = await getStream(streamId);
  if (!stream || !WAITING_STATES.includes(stream.state) || stream.podName !== null) return;
  const cost = streamCost(stream.options);
  if (worker.local.has(stream.id) || !hasRoom(worker, cost) || (await earlierFits(worker, stream))) return;
  const destinations = await destinationsOf(await getQueue(QUEUE_NAMES.recorder), stream);
  // Judged again with no wait before launch's reservation: two hand-offs at once cannot both take the last room.
  if (hasRoom(worker, cost)) await launch(worker, stream, destinations);
}

/**
 * When this worker's room frees, it takes the first queued streams (in the queue's order) that fit it itself, rather
 * than wait for their jobs' next offer, which may as well go to a full worker: a queued stream
 * starts as soon as the units are there. Their jobs, when they come, find them taken.
 */
export async function takeQueued(worker: RecorderHost): Promise<void> {
  const queue = await getQueue(QUEUE_NAMES.recorder);
  const launches: Promise<void>[] = [];
  for (const stream of await queuedStreams(TAKE_AT_ONCE)) {
    const cost = streamCost(stream.options);
    if (!hasRoom(worker, cost)) continue;
    const destinations = await destinationsOf(queue, stream);
    // Judged again after that read, with no wait before launch's reservation: a hand-off may have taken the room.
    // Not awaited here: each reserves its units before its first wait, so the next is judged with them counted.
    if (hasRoom(worker, cost)) launches.push(launch(worker, stream, destinations));
  }
  await Promise.all(launches);
}

/** A waiting stream's destinations: from its start job, which another worker may hold, or sealed in its row. */
async function destinationsOf(queue: Queue, stream: Stream): Promise<string[]> {
  const job = (await queue.getJob(`start-${stream.id}`)) as Job<RecorderStartJob> | undefined;
  return job?.data.destinations ?? openDestinations(stream.queuedDestinations);
}

/** Runs the stream's recorder here, once this worker has taken it, until it publishes or fails. */
async function launch(worker: RecorderHost, stream: Stream, destinations: string[]): Promise<void> {
  const cost = streamCost(stream.options);
  worker.reserved++;
  // Reserved until the recorder is among the worker's streams, which count it from then on.
  let reservedUnits = cost;
  worker.reservedUnits += reservedUnits;
  try {
    // One worker takes it: another that fetched its job, or took it from the queue, finds it taken.
    if (!(await takeStream(stream.id, worker.pod))) return;
    await reportRoom(worker.pod, roomOf(worker));
    const s = config.streaming;
    const recordingPath = wantsRecording(stream.options) ? recordingPathOf(stream) : undefined;
    const spec: RecorderSpec = {
      streamId: stream.id,
      streamName: stream.streamName,
      room: stream.room,
      accountId: stream.accountId,
      options: stream.options,
      ingestUrl: `${s.rtmpIngestUrl}/${stream.streamName}`,
      destinations,
      recordingPath,
    };
    const recorder = worker.driver.start(spec);
    const llhls = stream.options.isLowLatency ? packageLowLatency(spec, recorder) : undefined;
    // LL-HLS goes through Parley's own origin, so the media server's RTMP application is the one ingest.
    const ingests = [{ setting: "STREAMING_RTMP_INGEST_URL", url: s.rtmpIngestUrl }];
    const entry: LocalRecorder = { stream, recorder, recordingPath, ingests, llhls };
    worker.local.set(stream.id, entry);
    worker.reservedUnits -= reservedUnits;
    reservedUnits = 0;
    failOnExit(worker, entry);
    if (!(await claimStream(stream.id, { podName: worker.pod, host: worker.host, pid: recorder.pid }))) {
      await stopLocal(worker, entry, "stopped", "requested");
      return;
    }
    const started = await Promise.race([
      recorder.ready.then(() => true),
      recorder.exited.then(() => false),
      Bun.sleep(s.operationTimeoutMs + START_BACKSTOP_MARGIN_MS).then(() => false),
    ]);
    if (!started) {
      if (!entry.stopping) await stopLocal(worker, entry, "failed", "start_timeout");
      return;
    }
    if (!(await markRunning(stream.id))) {
      // The request gave up (timeout) or a stop came first: either way this recorder must go.
      const now = await getStream(stream.id);
      await stopLocal(worker, entry, now?.state === "failed" ? "failed" : "stopped", now?.reason ?? "requested");
      return;
    }
    entry.stream = (await getStream(stream.id)) ?? stream;
    await checkOccupancy(worker, entry);
    log.info({ stream: stream.streamName, pod: worker.pod, driver: worker.driver.name }, "stream running");
  } finally {
    worker.reserved--;
    worker.reservedUnits -= reservedUnits;
    await reportRoom(worker.pod, roomOf(worker));
  }
}

export async function stopJob(worker: RecorderHost, job: Job<RecorderStopJob>): Promise<void> {
  const { streamId, reason } = job.data;
  const stream = await getStream(streamId);
  // Only a stream marked stopping: a stop the API refused (503, the stream goes on) may still
  // reach Redis once it is back, and the API has then put the row back (control.ts requestStop).
  if (stream?.state !== "stopping") return;
  const mine = worker.local.get(streamId);
  if (mine) return stopLocal(worker, mine, "stopped", reason);
  if (stream.podName && stream.podName !== worker.pod && (await podAlive(stream.podName))) {
    const relayed: RecorderStopJob = { streamId, reason };
    await worker.pubsub.publish(podCommands(stream.podName), JSON.stringify(relayed));
    // The owner's finishStream rings the outbox: the job ends once that move has committed.
    const now = await waitForStream(
      streamId,
      (row) => !LIVE_STATES.includes(row.state),
      config.streaming.operationTimeoutMs,
    );
    if (!now || !LIVE_STATES.includes(now.state)) return;
    throw new Error("the recorder that owns the stream did not stop it in time");
  }
  await finishOrphan(worker, stream, "stopped", reason);
}

/** A stop another worker relayed to this one, the owner of the stream. */
export async function relayedStop(worker: RecorderHost, message: string): Promise<void> {
  const { streamId, reason } = JSON.parse(message) as RecorderStopJob;
  const entry = worker.local.get(streamId);
  if (entry) await stopLocal(worker, entry, "stopped", reason);
}

/**
 * Offers again every queued stream whose start job is gone, lost with a Redis that restarted
 * empty: the database keeps the queue, and Redis only rings the bell.
 */
async function reofferQueued(): Promise<void> {
  const queue = await getQueue(QUEUE_NAMES.recorder);
  for (const stream of await queuedStreams()) {
    if (await queue.getJob(`start-${stream.id}`)) continue;
    // Read again: a worker may have taken it, its job then gone, since the list was read.
    if ((await getStream(stream.id))?.state !== "queued") continue;
    const job: RecorderStartJob = { streamId: stream.id, destinations: openDestinations(stream.queuedDestinations) };
    await enqueue(QUEUE_NAMES.recorder, RECORDER_JOBS.start, job, startJobOptions(stream.id));
    log.info({ stream: stream.streamName }, "queued stream offered again");
  }
}

export async function reconcile(worker: RecorderHost, heartbeat: Heartbeat): Promise<void> {
  for (const stream of await liveStreams()) {
    if (worker.local.has(stream.id)) continue;
    if (stream.podName === null) {
      // Not taken by a worker yet: its request gives up on its own after the operation timeout.
      if (Date.now() - stream.createdAt.getTime() < config.streaming.operationTimeoutMs * 2) continue;
    } else if (stream.podName !== worker.pod && (!heartbeat.othersJudgeable() || (await podAlive(stream.podName)))) {
      continue;
    }
    await finishOrphan(worker, stream, "failed", "recorder_lost");
  }
  await reofferQueued();
}
