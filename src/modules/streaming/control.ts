/**
 * The API side of a stream: a start or stop request is recorded, handed to a recorder worker
 * through the BullMQ `recorder` queue, and answered once the row reaches the wanted state.
 * Stream keys are never stored, logged or returned: they travel only inside the start job.
 */
import { randomUUID } from "node:crypto";
import { and, eq, inArray, ne, or, sql } from "drizzle-orm";
import { config } from "../../core/config";
import { AppError, isDependencyDown } from "../../core/errors";
import { log } from "../../core/log";
import { db } from "../../db/client";
import { PROMPT_REDIS_MS, settledWithin } from "../../queue/connection";
import {
  enqueue,
  getQueue,
  QUEUE_NAMES,
  RECORDER_JOBS,
  type RecorderStartJob,
  type RecorderStopJob,
  startJobOptions,
} from "../../queue/queues";
import { LimitExceeded, limitsOf, quotaExceeded } from "../limits";
import { streamCost } from "./cost";
import type { StreamingModel } from "./model";
import { type StreamOptions, wantsRecording } from "./options";
import { destinationsOf, invalid, optionsOf, type StartRequest } from "./request";
import { queuePosition } from "./queue";
import { streams } from "./schema";
import { waitForStream } from "./state";
import {
  bareRoom,
  LIVE_STATES,
  OPEN_STATES,
  type Stream,
  type StreamStarted,
  streamNameFor,
  streamUrls,
} from "./stream";
import { finishStream, markStopping, unmarkStopping } from "./transitions";

export type StreamStopped = typeof StreamingModel.stopped.static;

export type StreamQueued = typeof StreamingModel.queued.static;

/** The room's stream that is live or queued. */
async function liveStreamOfRoom(accountId: string, room: string): Promise<Stream | undefined> {
  const [stream] = await db
    .select()
    .from(streams)
    .where(and(eq(streams.accountId, accountId), eq(streams.room, room), inArray(streams.state, OPEN_STATES)));
  return stream;
}

/** Seconds a queued stream may wait, were it not for the ones ahead of it: a stream's typical length. */
const TYPICAL_STREAM_S = 3600;

/**
 * The queued answer: the stream's place, and a rough wait. The wait assumes the streams that
 * run end evenly over the length finished streams lasted lately (an hour when none did), one
 * freeing the room of one queued stream.
 */
async function queuedAnswer(stream: Stream): Promise<StreamQueued> {
  const position = await queuePosition(db, stream);
  const [recent] = await db
    .select({
      seconds: sql<number | null>`avg(extract(epoch from ${streams.stoppedAt} - ${streams.startedAt}))::float8`,
      running: sql<number>`(select count(*)::int from ${streams} where ${streams.state} = 'running')`,
    })
    .from(streams)
    .where(and(sql`${streams.startedAt} is not null`, sql`${streams.stoppedAt} > now() - interval '1 day'`));
  const typical = recent?.seconds ?? TYPICAL_STREAM_S;
  const running = Math.max(1, recent?.running ?? 0);
  return {
    started: false,
    queued: true,
    stream_name: stream.streamName,
    position,
    estimated_start_s: Math.ceil((position * typical) / running),
  };
}

export async function startStream(accountId: string, request: StartRequest): Promise<StreamStarted | StreamQueued> {
  const room = bareRoom(request.room_name);
  if (room === "") invalid("room_name must name a room");
  const options = optionsOf(request);
  const destinations = destinationsOf(request);
  const timeoutMs = config.streaming.operationTimeoutMs;

  // Read before the transaction, which may use only its own handle.
  const limits = await limitsOf(accountId);
  await checkQueueRoom();
  let stream: Stream | undefined;
  for (let attempt = 0; attempt < 3 && !stream; attempt++) {
    const [created] = await db.transaction(async (tx) => {
      await checkStreamQuotas(tx, accountId, room, options, limits);
      return tx
        .insert(streams)
        .values({
          id: randomUUID(),
          accountId,
          room,
          streamName: streamNameFor(room),
          state: "starting",
          options,
          units: streamCost(options),
          priority: request.priority ?? 0,
        })
        .onConflictDoNothing()
        .returning();
    });
    if (created) {
      const job: RecorderStartJob = { streamId: created.id, destinations };
      try {
        await enqueue(QUEUE_NAMES.recorder, RECORDER_JOBS.start, job, startJobOptions(created.id));
      } catch (error) {
        if (!isDependencyDown(error)) throw error;
        // No recorder will start it: the row is finished now, and a job that reaches Redis
        // late finds it failed and does nothing (workers/recorder/jobs.ts starts only `starting` streams).
        await finishStream(created.id, ["starting"], "failed", QUEUE_UNAVAILABLE);
        log.warn(
          { streamId: created.id, err: (error as Error).message },
          "stream not started: the recorder queue is unavailable",
        );
        throw new AppError(
          "dependency_down",
          "the recorder queue is unavailable, so the stream was not started; retry later",
          { started: false },
        );
      }
      stream = created;
      break;
    }
    // Another request for this room won the race (or a stream is live there already).
    stream = await liveStreamOfRoom(accountId, room);
  }
  if (!stream)
    throw new AppError("conflict", "the room's stream changed state while starting; send the request again", {
      started: false,
    });
  if (stream.state === "queued") return queuedAnswer(stream);
  if (stream.state === "stopping") {
    throw new AppError("conflict", "the room's stream is stopping; send the start again once it has stopped", {
      started: false,
    });
  }

  const settled = await waitForStream(stream.id, (row) => row.state !== "starting", timeoutMs);
  if (settled.state === "running") return streamUrls(settled);
  // No worker had room: answered at once, the stream starts by itself once one has.
  if (settled.state === "queued") return queuedAnswer(settled);
  if (settled.state === "starting") {
    // Give up on this attempt: the recorder that is still starting sees the row failed and stops itself.
    await finishStream(settled.id, ["starting"], "failed", "timeout");
    await settledWithin(
      getQueue(QUEUE_NAMES.recorder).then((queue) => queue.remove(`start-${settled.id}`)),
      PROMPT_REDIS_MS,
    );
    throw new AppError(
      "timeout",
      `the stream did not start within ${timeoutMs / 1000} seconds; send the request again`,
      {
        started: false,
      },
    );
  }
  throw new AppError("dependency_down", `the stream could not start: ${settled.reason ?? settled.state}`, {
    started: false,
  });
}

/** Seconds a start refused for a full queue is told to wait: about the time a few queued streams take to start. */
const QUEUE_FULL_RETRY_AFTER_S = 30;

/**
 * The queue of every account together is bounded (STREAMING_QUEUE_MAX): with that many starts
 * waiting, a new one would wait behind them all, so it is refused at once with Retry-After.
 */
async function checkQueueRoom(): Promise<void> {
  const [queued] = await db
    .select({ count: sql<number>`count(*)::int` })
    .from(streams)
    .where(eq(streams.state, "queued"));
  const max = config.streaming.queueMax;
  if (queued!.count >= max) {
    throw new LimitExceeded(
      "rate_limited",
      `${queued!.count} streams are waiting for a recorder worker, the most this server queues ` +
        `(STREAMING_QUEUE_MAX ${max}); retry later`,
      [],
      QUEUE_FULL_RETRY_AFTER_S,
      { started: false },
    );
  }
}

type Transaction = Parameters<Parameters<typeof db.transaction>[0]>[0];

/**
 * The account's live-stream and recording quotas, counted in the database so they hold
 * across processes and without Redis. Starts of one account queue on an advisory lock, so
 * two can never both take the last place. The room's own live stream is left out: starting
 * it again adds nothing.
 */
async function checkStreamQuotas(
  tx: Transaction,
  accountId: string,
  room: string,
  options: StreamOptions,
  limits: Awaited<ReturnType<typeof limitsOf>>,
): Promise<void> {
  // drizzle has no builder for advisory locks.
  await tx.execute(sql`select pg_advisory_xact_lock(hashtextextended(${`streams/${accountId}`}, 0))`);
  // StreamOptions is jsonb: its flags are read with ->> (see wantsRecording).
  const recording = or(
    sql`(${streams.options} ->> 'isRecording')::boolean`,
    sql`(${streams.options} ->> 'isVod')::boolean`,
  );
  const [live] = await tx
    .select({
      streams: sql<number>`count(*)::int`,
      recordings: sql<number>`(count(*) filter (where ${recording}))::int`,
      queued: sql<number>`(count(*) filter (where ${streams.state} = 'queued'))::int`,
      units: sql<number>`coalesce(sum(${streams.units}), 0)::int`,
    })
    .from(streams)
    .where(and(eq(streams.accountId, accountId), inArray(streams.state, OPEN_STATES), ne(streams.room, room)));
  const streamLimit = limits["streams.concurrent"];
  if (live!.streams >= streamLimit) {
    throw quotaExceeded(
      "streams.concurrent",
      streamLimit,
      live!.streams,
      "no more live streams at once; stop one first",
      { started: false },
    );
  }
  // Units rather than streams: a five-quality ladder holds a recorder as six audio-only streams do.
  const unitLimit = limits["streams.units"];
  const units = streamCost(options);
  if (live!.units + units > unitLimit) {
    throw quotaExceeded(
      "streams.units",
      unitLimit,
      live!.units,
      `a stream of ${units} recorder units would pass the account's units at once; stop one first`,
      { started: false },
    );
  }
  // With this many of its starts already waiting, another would wait behind them: refused instead.
  const queuedLimit = limits["streams.queued"];
  if (live!.queued >= queuedLimit) {
    throw quotaExceeded(
      "streams.queued",
      queuedLimit,
      live!.queued,
      "no more streams waiting for a recorder at once; stop one or wait for one to start",
      { started: false },
    );
  }
  const recordingLimit = limits["recordings.concurrent"];
  if (wantsRecording(options) && live!.recordings >= recordingLimit) {
    throw quotaExceeded(
      "recordings.concurrent",
      recordingLimit,
      live!.recordings,
      "no more recording streams at once; stop one first",
      { started: false },
    );
  }
}

/** The stop reason of a stream whose start or stop could not be queued (Redis down). */
export const QUEUE_UNAVAILABLE = "queue_unavailable";

export async function stopStream(accountId: string, roomName: string): Promise<StreamStopped> {
  const stream = await liveStreamOfRoom(accountId, bareRoom(roomName));
  if (!stream) throw new AppError("not_found", "no live stream in that room");
  if (stream.state === "queued" && (await finishStream(stream.id, ["queued"], "stopped", "requested"))) {
    // Out of the queue: its job, should a worker fetch it before it is removed, finds the row stopped.
    await settledWithin(
      getQueue(QUEUE_NAMES.recorder).then((queue) => queue.remove(`start-${stream.id}`)),
      PROMPT_REDIS_MS,
    );
    return { started: false, stream_name: stream.streamName, pod_name: "" };
  }
  await requestStop(stream, "requested");
  const timeoutMs = config.streaming.operationTimeoutMs;
  const settled = await waitForStream(stream.id, (row) => !LIVE_STATES.includes(row.state), timeoutMs);
  const body: StreamStopped = { started: false, stream_name: settled.streamName, pod_name: settled.podName ?? "" };
  if (LIVE_STATES.includes(settled.state)) {
    throw new AppError(
      "timeout",
      `the stream did not stop within ${timeoutMs / 1000} seconds; send the request again`,
      { ...body },
    );
  }
  return body;
}

/**
 * Marks the stream stopping, then asks a recorder worker to stop it. A worker acts on a stop
 * only while the row is `stopping` (workers/recorder/jobs.ts): a stop refused for want of the
 * queue (a 503 here) may still reach Redis once it is back, e.g. one sent while a connection
 * was between two reconnection attempts, and must then find the stream as the 503 left it.
 * So a refused stop puts the row back as it was (running), rather than leaving it `stopping`
 * with nobody to stop it, and the stream goes on.
 */
async function requestStop(stream: Stream, reason: string): Promise<void> {
  const job: RecorderStopJob = { streamId: stream.id, reason };
  const marked = await markStopping(stream.id);
  try {
    await enqueue(QUEUE_NAMES.recorder, RECORDER_JOBS.stop, job, {
      jobId: `stop-${stream.id}`,
      attempts: 3,
      backoff: { type: "fixed", delay: 500 },
      removeOnComplete: true,
      removeOnFail: true,
    });
  } catch (error) {
    if (marked) await unmarkStopping(stream.id, marked);
    if (!isDependencyDown(error)) throw error;
    throw new AppError(
      "dependency_down",
      "the recorder queue is unavailable, so the stream was not stopped; it goes on, retry later",
      {
        started: false,
        stream_name: stream.streamName,
        pod_name: stream.podName ?? "",
      },
    );
  }
}
