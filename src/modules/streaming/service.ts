/**
 * Live streams of conference rooms. The API side records a stream and asks a recorder
 * worker (through the BullMQ `recorder` queue) to start or stop it, then waits for the
 * stream's row to reach the wanted state; the worker side moves the row along. Both sides
 * announce every state change on Redis so a waiting request wakes at once, on any process.
 *
 * Stream keys are never stored, logged or returned: they travel only inside the start job.
 */
import { randomBytes, randomUUID, timingSafeEqual } from "node:crypto";
import { and, desc, eq, inArray, ne, or, sql } from "drizzle-orm";
import { config } from "../../config";
import { roomAddress } from "../../core/room-key";
import { db } from "../../db/client";
import { AppError, isDependencyDown } from "../../core/errors";
import { log } from "../../core/log";
import type { Subscription } from "../../core/pubsub";
import { PROMPT_REDIS_MS, promptRedis, redisKey, settledWithin, withinRedis } from "../../queue/connection";
import { pubsub } from "../../queue/pubsub";
import { enqueue, getQueue, QUEUE_NAMES, RECORDER_JOBS, type RecorderStartJob, type RecorderStopJob } from "../../queue/queues";
import { accountKey } from "../../core/objects";
import { objects } from "../../storage/objects";
import { appendEvent } from "../events/service";
import { quotaExceeded } from "../limits/quotas";
import { limitsOf } from "../limits/service";
import { recordEvent } from "../webhooks/outbox";
import { BITRATE_LADDER, baseStreamName } from "./ladder";
import { hostAllowed, PLATFORM_NAMES, platformIngest, SAFE_URL_TEXT } from "./platforms";
import { type StreamOptions, type StreamState, streams } from "./schema";

export type Stream = typeof streams.$inferSelect;

export const LIVE_STATES: StreamState[] = ["starting", "running", "stopping"];

export const DEFAULT_RECONNECT_WINDOW = 6000;
/** A day; a longer window would keep an empty room's recorder for no one. */
export const MAX_RECONNECT_WINDOW = 8_640_000;

export interface StartRequest {
  room_name: string;
  stream_keys?: { key: string; value: string }[];
  stream_urls?: string[];
  is_low_latency?: boolean;
  codec?: string;
  is_recording?: boolean;
  multi_bitrate?: boolean;
  is_vod?: boolean;
  username?: boolean;
  audio_only?: boolean;
  layout?: string;
  profile?: string;
  reconnect_window?: string | number;
}

export interface StreamStarted {
  started: true;
  stream_name: string;
  pod_name: string;
  hls_url: string;
  low_latency_hls_url: string;
  vod_url: string;
  rtmp_url: string;
  flv_url: string;
}

export interface StreamStopped {
  started: false;
  stream_name: string;
  pod_name: string;
}

/** The room events and streams are filed under: the key (core/room-key) of the room, without any `@conference.domain`. */
export function bareRoom(roomName: string): string {
  return roomName.trim() === "" ? "" : roomAddress(roomName).room;
}

function invalid(message: string): never {
  throw new AppError("validation_failed", message, { started: false });
}

export function parseReconnectWindow(value: string | number | undefined): number {
  if (value === undefined || value === "") return DEFAULT_RECONNECT_WINDOW;
  const units = typeof value === "number" ? value : /^\s*\d+\s*$/.test(value) ? Number(value) : Number.NaN;
  if (!Number.isInteger(units) || units < 0 || units > MAX_RECONNECT_WINDOW) {
    invalid(`reconnect_window must be a whole number from 0 to ${MAX_RECONNECT_WINDOW} (6000 = one minute)`);
  }
  return units;
}

/** Turns stream_keys and stream_urls into RTMP destination URLs, refusing unknown platforms and unlisted hosts. */
export function destinationsOf(request: Pick<StartRequest, "stream_keys" | "stream_urls">): string[] {
  const destinations: string[] = [];
  for (const { key: platform, value } of request.stream_keys ?? []) {
    const ingest = platformIngest(platform);
    if (!ingest) invalid(`unknown platform "${platform}" in stream_keys; known platforms: ${PLATFORM_NAMES.join(", ")}`);
    if (!SAFE_URL_TEXT.test(value)) invalid(`the stream key for "${platform}" holds characters a stream key cannot have`);
    destinations.push(`${ingest}/${value}`);
  }
  for (const raw of request.stream_urls ?? []) {
    let parsed: URL;
    try {
      parsed = new URL(raw);
    } catch {
      invalid("every stream_urls entry must be an rtmp:// or rtmps:// URL");
    }
    if (parsed.protocol !== "rtmp:" && parsed.protocol !== "rtmps:") invalid("every stream_urls entry must be an rtmp:// or rtmps:// URL");
    if (!SAFE_URL_TEXT.test(raw)) invalid("a stream_urls entry holds characters an RTMP URL cannot have");
    if (!hostAllowed(parsed.hostname, config.streaming.destinationHosts)) {
      // Only the host is named: the rest of the URL usually carries a stream key.
      invalid(`stream_urls host "${parsed.hostname}" is not on this server's allow-list (STREAMING_DESTINATION_HOSTS)`);
    }
    destinations.push(raw);
  }
  return destinations;
}

export function optionsOf(request: StartRequest): StreamOptions {
  const codec = (request.codec ?? "H264").toUpperCase();
  if (codec !== "H264" && codec !== "H265") invalid('codec must be "H264" or "H265"');
  const layout = request.layout === undefined || request.layout === "" ? "desktop" : request.layout.toLowerCase();
  if (layout !== "desktop" && layout !== "mobile") invalid('layout must be "mobile" or left out for the desktop layout');
  const profile = request.profile === undefined || request.profile === "" ? "adaptive" : request.profile.toUpperCase();
  if (profile !== "adaptive" && profile !== "HD") invalid('profile must be "HD" or left out for adaptive bitrate');
  if (request.audio_only && request.multi_bitrate) invalid("multi_bitrate transcodes video, so it cannot go with audio_only");
  return {
    codec,
    isLowLatency: request.is_low_latency ?? false,
    isRecording: request.is_recording ?? false,
    multiBitrate: request.multi_bitrate ?? false,
    isVod: request.is_vod ?? false,
    username: request.username ?? false,
    audioOnly: request.audio_only ?? false,
    layout,
    profile,
    reconnectWindow: parseReconnectWindow(request.reconnect_window),
    platforms: (request.stream_keys ?? []).map(({ key }) => key.toLowerCase()),
    destinationCount: (request.stream_keys?.length ?? 0) + (request.stream_urls?.length ?? 0),
  };
}

/** Random bits in a stream name. The viewer-count and VOD routes answer anyone who knows a name, so it must not be guessable. */
export const STREAM_NAME_RANDOM_BYTES = 16;

/** `<room slug>-<32 hex digits>`: 128 random bits after a readable prefix. */
export function streamNameFor(room: string): string {
  const slug =
    room
      .replace(/[^a-z0-9]+/g, "-")
      .replace(/^-+|-+$/g, "")
      .slice(0, 40) || "stream";
  return `${slug}-${randomBytes(STREAM_NAME_RANDOM_BYTES).toString("hex")}`;
}

/** The RTMP name the stream's top quality is published under. */
function publishedName(stream: Pick<Stream, "streamName" | "options">): string {
  return stream.options.multiBitrate ? `${stream.streamName}${BITRATE_LADDER[0]!.suffix}` : stream.streamName;
}

export function streamUrls(stream: Stream): StreamStarted {
  const s = config.streaming;
  const top = publishedName(stream);
  return {
    started: true,
    stream_name: stream.streamName,
    pod_name: stream.podName ?? "",
    // With multi_bitrate the media server writes the master playlist under the plain name.
    hls_url: `${s.hlsBaseUrl}/${stream.streamName}.m3u8`,
    low_latency_hls_url: stream.options.isLowLatency ? `${s.llhlsBaseUrl}/${stream.streamName}.m3u8` : "",
    vod_url: stream.options.isVod ? `${s.vodBaseUrl}/${stream.streamName}.mp4` : "",
    rtmp_url: `${s.rtmpBaseUrl}/${top}`,
    flv_url: `${s.flvBaseUrl}/${top}.flv`,
  };
}

export function recordingObjectKey(stream: Pick<Stream, "accountId" | "streamName">): string {
  return accountKey(stream.accountId, `recordings/${stream.streamName}.mp4`);
}

export function wantsRecording(options: StreamOptions): boolean {
  return options.isRecording || options.isVod;
}

// ---------------------------------------------------------------- state changes

/** How catalogue events name a stream. */
function streamNamed(stream: Stream) {
  return { stream_id: stream.id, stream_name: stream.streamName, room: stream.room };
}

const STATE_CHANNEL = "streams:state";
let stateSubscription: Subscription | undefined;
const stateWaiters = new Map<string, Set<() => void>>();

/** Best effort: the row is the truth, and a waiter that misses the announcement finds the change on its next poll. */
async function announce(streamId: string): Promise<void> {
  await pubsub()
    .publish(STATE_CHANNEL, streamId, { withinMs: PROMPT_REDIS_MS })
    .catch((error: Error) => log.warn({ streamId, err: error.message }, "stream state change not announced"));
}

/**
 * Waits for the subscription at most PROMPT_REDIS_MS, and not at all while Redis is away: it
 * is made once Redis is back, and waiters poll the row meanwhile. A subscription that fails
 * (the connection dropped at shutdown) leaves the waiters to their poll.
 */
async function subscribeToStates(): Promise<void> {
  stateSubscription ??= pubsub().subscribe("stream-states", [STATE_CHANNEL], (_channel, streamId) => {
    for (const wake of stateWaiters.get(streamId) ?? []) wake();
  });
  await stateSubscription.settle(PROMPT_REDIS_MS);
}

export async function stopStateSubscriber(): Promise<void> {
  const subscription = stateSubscription;
  stateSubscription = undefined;
  await subscription?.close();
}

/** Waits until the stream satisfies `done` or the time is up; answers the last row seen. */
async function waitForStream(streamId: string, done: (stream: Stream) => boolean, timeoutMs: number): Promise<Stream> {
  await subscribeToStates();
  const deadline = Date.now() + timeoutMs;
  let wake: () => void = () => {};
  const waiters = stateWaiters.get(streamId) ?? new Set();
  stateWaiters.set(streamId, waiters);
  const waker = () => wake();
  waiters.add(waker);
  try {
    for (;;) {
      const stream = await getStream(streamId);
      if (!stream || done(stream) || Date.now() >= deadline) return stream!;
      // The announcement wakes us at once; the poll covers a message lost with a dropped connection.
      await new Promise<void>((resolve) => {
        wake = resolve;
        setTimeout(resolve, Math.min(500, Math.max(0, deadline - Date.now())));
      });
    }
  } finally {
    waiters.delete(waker);
    if (waiters.size === 0) stateWaiters.delete(streamId);
  }
}

export async function getStream(streamId: string): Promise<Stream | undefined> {
  const [stream] = await db.select().from(streams).where(eq(streams.id, streamId));
  return stream;
}

async function liveStreamOfRoom(accountId: string, room: string): Promise<Stream | undefined> {
  const [stream] = await db
    .select()
    .from(streams)
    .where(and(eq(streams.accountId, accountId), eq(streams.room, room), inArray(streams.state, LIVE_STATES)));
  return stream;
}

// ---------------------------------------------------------------- API side

export async function startStream(accountId: string, request: StartRequest): Promise<StreamStarted> {
  const room = bareRoom(request.room_name);
  if (room === "") invalid("room_name must name a room");
  const options = optionsOf(request);
  const destinations = destinationsOf(request);
  const timeoutMs = config.streaming.operationTimeoutMs;

  // Read before the transaction, which may use only its own handle.
  const limits = await limitsOf(accountId);
  let stream: Stream | undefined;
  for (let attempt = 0; attempt < 3 && !stream; attempt++) {
    const [created] = await db.transaction(async (tx) => {
      await checkStreamQuotas(tx, accountId, room, options, limits);
      return tx
        .insert(streams)
        .values({ id: randomUUID(), accountId, room, streamName: streamNameFor(room), state: "starting", options })
        .onConflictDoNothing()
        .returning();
    });
    if (created) {
      const job: RecorderStartJob = { streamId: created.id, destinations };
      try {
        await enqueue(QUEUE_NAMES.recorder, RECORDER_JOBS.start, job, {
          jobId: `start-${created.id}`,
          attempts: 1,
          // The job holds stream keys: it leaves Redis the moment it ends, either way.
          removeOnComplete: true,
          removeOnFail: true,
        });
      } catch (error) {
        if (!isDependencyDown(error)) throw error;
        // No recorder will start it: the row is finished now, and a job that reaches Redis
        // late finds it failed and does nothing (workers/recorder.ts starts only `starting` streams).
        await finishStream(created.id, ["starting"], "failed", QUEUE_UNAVAILABLE);
        log.warn({ streamId: created.id, err: (error as Error).message }, "stream not started: the recorder queue is unavailable");
        throw new AppError("dependency_down", "the recorder queue is unavailable, so the stream was not started; retry later", { started: false });
      }
      stream = created;
      break;
    }
    // Another request for this room won the race (or a stream is live there already).
    stream = await liveStreamOfRoom(accountId, room);
  }
  if (!stream) throw new AppError("conflict", "the room's stream changed state while starting; send the request again", { started: false });
  if (stream.state === "stopping") {
    throw new AppError("conflict", "the room's stream is stopping; send the start again once it has stopped", { started: false });
  }

  const settled = await waitForStream(stream.id, (row) => row.state !== "starting", timeoutMs);
  if (settled.state === "running") return streamUrls(settled);
  if (settled.state === "starting") {
    // Give up on this attempt: the recorder that is still starting sees the row failed and stops itself.
    await finishStream(settled.id, ["starting"], "failed", "timeout");
    await settledWithin(getQueue(QUEUE_NAMES.recorder).remove(`start-${settled.id}`), PROMPT_REDIS_MS);
    throw new AppError("timeout", `the stream did not start within ${timeoutMs / 1000} seconds; send the request again`, {
      started: false,
    });
  }
  throw new AppError("dependency_down", `the stream could not start: ${settled.reason ?? settled.state}`, { started: false });
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
  const recording = or(sql`(${streams.options} ->> 'isRecording')::boolean`, sql`(${streams.options} ->> 'isVod')::boolean`);
  const [live] = await tx
    .select({ streams: sql<number>`count(*)::int`, recordings: sql<number>`(count(*) filter (where ${recording}))::int` })
    .from(streams)
    .where(and(eq(streams.accountId, accountId), inArray(streams.state, LIVE_STATES), ne(streams.room, room)));
  const streamLimit = limits["streams.concurrent"];
  if (live!.streams >= streamLimit) {
    throw quotaExceeded("streams.concurrent", streamLimit, live!.streams, "no more live streams at once; stop one first", { started: false });
  }
  const recordingLimit = limits["recordings.concurrent"];
  if (wantsRecording(options) && live!.recordings >= recordingLimit) {
    throw quotaExceeded("recordings.concurrent", recordingLimit, live!.recordings, "no more recording streams at once; stop one first", { started: false });
  }
}

/** The stop reason of a stream whose start or stop could not be queued (Redis down). */
export const QUEUE_UNAVAILABLE = "queue_unavailable";

export async function stopStream(accountId: string, roomName: string): Promise<StreamStopped> {
  const stream = await liveStreamOfRoom(accountId, bareRoom(roomName));
  if (!stream) throw new AppError("not_found", "no live stream in that room");
  await requestStop(stream, "requested");
  const timeoutMs = config.streaming.operationTimeoutMs;
  const settled = await waitForStream(stream.id, (row) => !LIVE_STATES.includes(row.state), timeoutMs);
  const body: StreamStopped = { started: false, stream_name: settled.streamName, pod_name: settled.podName ?? "" };
  if (LIVE_STATES.includes(settled.state)) {
    throw new AppError("timeout", `the stream did not stop within ${timeoutMs / 1000} seconds; send the request again`, { ...body });
  }
  return body;
}

/**
 * Asks a recorder worker to stop the stream, then marks it stopping. Queued first: when the
 * queue is unavailable the caller gets a 503 and the stream goes on as it was (running),
 * rather than being left `stopping` with nobody to stop it.
 */
async function requestStop(stream: Stream, reason: string): Promise<void> {
  const job: RecorderStopJob = { streamId: stream.id, reason };
  try {
    await enqueue(QUEUE_NAMES.recorder, RECORDER_JOBS.stop, job, {
      jobId: `stop-${stream.id}`,
      attempts: 3,
      backoff: { type: "fixed", delay: 500 },
      removeOnComplete: true,
      removeOnFail: true,
    });
  } catch (error) {
    if (!isDependencyDown(error)) throw error;
    throw new AppError("dependency_down", "the recorder queue is unavailable, so the stream was not stopped; it goes on, retry later", {
      started: false,
      stream_name: stream.streamName,
      pod_name: stream.podName ?? "",
    });
  }
  await db
    .update(streams)
    .set({ state: "stopping" })
    .where(and(eq(streams.id, stream.id), inArray(streams.state, ["starting", "running"])));
  await announce(stream.id);
}

// ---------------------------------------------------------------- recorder side

export interface RecorderPlace {
  podName: string;
  host: string;
  pid: number;
}

/** Claims the recorder slot before the recorder runs, so reconciliation can find its process. */
export async function claimStream(streamId: string, place: RecorderPlace): Promise<boolean> {
  const claimed = await db
    .update(streams)
    .set(place)
    .where(and(eq(streams.id, streamId), eq(streams.state, "starting")))
    .returning({ id: streams.id });
  return claimed.length > 0;
}

/** The recorder is publishing: starting → running. False when the request gave up meanwhile. */
export async function markRunning(streamId: string): Promise<boolean> {
  const stream = await db.transaction(async (tx) => {
    const [running] = await tx
      .update(streams)
      .set({ state: "running", startedAt: new Date() })
      .where(and(eq(streams.id, streamId), eq(streams.state, "starting")))
      .returning();
    if (running) await recordEvent(tx, running.accountId, "stream.started", { ...streamNamed(running), recording: running.options.isRecording });
    return running;
  });
  if (!stream) return false;
  const room = stream.room;
  await appendEvent({
    accountId: stream.accountId,
    kind: "stream_started",
    room,
    occurredAt: stream.startedAt!,
    subject: stream.streamName,
    payload: { recording: stream.options.isRecording },
    dedupeKey: `stream:${stream.id}:started`,
  });
  if (stream.options.isRecording) {
    await appendEvent({
      accountId: stream.accountId,
      kind: "recording_started",
      room,
      occurredAt: stream.startedAt!,
      subject: stream.streamName,
      dedupeKey: `stream:${stream.id}:recording_started`,
    });
  }
  // Announced last, so whoever wakes on it also finds the events written.
  await announce(streamId);
  return true;
}

/**
 * Moves a stream from one of `from` to stopped or failed, once: the recorder, the stop job
 * and reconciliation may race to do it, and only the first one writes the events.
 */
export async function finishStream(
  streamId: string,
  from: StreamState[],
  state: "stopped" | "failed",
  reason: string,
  recordingKey?: string,
): Promise<Stream | undefined> {
  const stream = await db.transaction(async (tx) => {
    const [finished] = await tx
      .update(streams)
      .set({ state, reason, stoppedAt: new Date(), ...(recordingKey ? { recordingKey } : {}) })
      .where(and(eq(streams.id, streamId), inArray(streams.state, from)))
      .returning();
    if (finished) await recordEvent(tx, finished.accountId, state === "failed" ? "stream.failed" : "stream.stopped", { ...streamNamed(finished), reason });
    if (finished && recordingKey) await recordEvent(tx, finished.accountId, "recording.ready", { ...streamNamed(finished), object_key: recordingKey, vod_url: streamUrls(finished).vod_url });
    return finished;
  });
  if (!stream) return undefined;
  if (stream.startedAt) {
    const viewersKey = redisKey("stream", stream.streamName, "viewers");
    const peakKey = redisKey("stream", stream.streamName, "peak");
    // Viewer sets live in Redis only; without it the peak is reported as 0.
    const peak = await withinRedis(promptRedis(), "reading the viewer peak", async () => {
      const [[, value]] = (await promptRedis().multi().get(peakKey).del(viewersKey).expire(peakKey, 86_400).exec()) as [[Error | null, string | null]];
      return Number(value ?? 0);
    }).catch(() => 0);
    await appendEvent({
      accountId: stream.accountId,
      kind: "stream_stopped",
      room: stream.room,
      occurredAt: stream.stoppedAt!,
      subject: stream.streamName,
      payload: { recording: stream.options.isRecording, reason, peak_viewers: peak },
      dedupeKey: `stream:${stream.id}:stopped`,
    });
    if (stream.options.isRecording) {
      await appendEvent({
        accountId: stream.accountId,
        kind: "recording_stopped",
        room: stream.room,
        occurredAt: stream.stoppedAt!,
        subject: stream.streamName,
        payload: recordingKey ? { key: recordingKey } : {},
        dedupeKey: `stream:${stream.id}:recording_stopped`,
      });
    }
  }
  await announce(streamId);
  return stream;
}

export async function liveStreams(): Promise<Stream[]> {
  return db.select().from(streams).where(inArray(streams.state, LIVE_STATES));
}

// ---------------------------------------------------------------- media-server callbacks

export const MEDIA_CALLBACKS = ["on_publish", "on_unpublish", "on_play", "on_stop", "on_done", "on_publish_done", "on_play_done"] as const;
export type MediaCallback = (typeof MEDIA_CALLBACKS)[number];

/** Accepts a callback when it carries the shared secret (if one is set) and comes from an allowed address (if a list is set). */
export function callbackAllowed(secret: string | undefined, address: string | undefined): boolean {
  const wanted = config.streaming.callbackSecret;
  if (wanted !== undefined) {
    const given = Buffer.from(secret ?? "");
    const expected = Buffer.from(wanted);
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return false;
  }
  const addresses = config.streaming.callbackAddresses;
  if (addresses.length > 0 && (address === undefined || !addresses.includes(address))) return false;
  return true;
}

async function streamByName(streamName: string): Promise<Stream | undefined> {
  const [stream] = await db.select().from(streams).where(eq(streams.streamName, streamName));
  return stream;
}

// Adds or removes one viewer and keeps the peak, atomically, so API processes never race.
const VIEWER_SCRIPT = `
local changed
if ARGV[1] == 'add' then changed = redis.call('SADD', KEYS[1], ARGV[2]) else changed = redis.call('SREM', KEYS[1], ARGV[2]) end
local n = redis.call('SCARD', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end
return {changed, n}`;

/** Viewers are counted in Redis only: while it is away a play is allowed and left uncounted. */
async function changeViewers(stream: Stream, change: "add" | "remove", client: string): Promise<void> {
  const counted = await withinRedis(
    promptRedis(),
    "counting viewers",
    () =>
      promptRedis().eval(
        VIEWER_SCRIPT,
        2,
        redisKey("stream", stream.streamName, "viewers"),
        redisKey("stream", stream.streamName, "peak"),
        change,
        client,
      ) as Promise<[number, number]>,
  ).catch((error: Error) => {
    if (!isDependencyDown(error)) throw error;
    log.warn({ stream: stream.streamName, err: error.message }, "viewer not counted: Redis is unavailable");
    return undefined;
  });
  if (!counted) return;
  const [changed, viewers] = counted;
  if (changed === 0) return;
  await appendEvent({
    accountId: stream.accountId,
    kind: "viewers_changed",
    room: stream.room,
    occurredAt: new Date(),
    subject: stream.streamName,
    payload: { viewers },
    dedupeKey: `stream:${stream.id}:viewers:${change}:${client}`,
  });
}

/**
 * One media-server callback, from SRS (JSON: action, stream, client_id) or nginx-rtmp
 * (form: call, name, clientid). Publishing is allowed only for a live stream's names;
 * plays and their ends move the viewer set. Throws to refuse.
 */
export async function handleMediaCallback(callback: MediaCallback, fields: Record<string, unknown>): Promise<void> {
  const field = (...names: string[]) => {
    for (const name of names) if (fields[name] !== undefined && fields[name] !== null) return String(fields[name]);
    return "";
  };
  const published = field("name", "stream");
  const app = field("app");
  const client = `${app}/${field("clientid", "client_id")}`;
  // nginx-rtmp's plain on_done fires for players and publishers alike; `call` says which one it was.
  const call = field("call", "action").replace(/^on_/, "") || callback.replace(/^on_/, "");
  const stream = /^[A-Za-z0-9._-]{1,160}$/.test(published) ? await streamByName(baseStreamName(published)) : undefined;
  switch (call) {
    case "publish":
      if (!stream || !["starting", "running"].includes(stream.state)) throw new AppError("forbidden", "no live stream is published under that name");
      return;
    case "play":
      if (!stream) throw new AppError("not_found", "no stream by that name");
      if (!LIVE_STATES.includes(stream.state)) throw new AppError("forbidden", "the stream is not live");
      await changeViewers(stream, "add", client);
      return;
    case "stop":
    case "done":
    case "play_done":
      if (stream) await changeViewers(stream, "remove", client);
      return;
    default:
      // unpublish / publish_done: the recorder itself notices its publisher ending.
      return;
  }
}

export async function viewerCount(streamName: string): Promise<Record<string, { current_viewers: number; uptime: number }>> {
  const stream = await streamByName(streamName);
  if (!stream) throw new AppError("not_found", "no stream by that name");
  const viewersKey = redisKey("stream", stream.streamName, "viewers");
  // Without Redis the count is unknown: a 503 rather than a made-up number.
  const viewers = LIVE_STATES.includes(stream.state) ? await withinRedis(promptRedis(), "counting viewers", () => promptRedis().scard(viewersKey)) : 0;
  const end = stream.stoppedAt?.getTime() ?? Date.now();
  const uptime = stream.startedAt ? Math.max(0, Math.floor((end - stream.startedAt.getTime()) / 1000)) : 0;
  return { [stream.streamName]: { current_viewers: viewers, uptime } };
}

/** A short-lived address of the finished stream's MP4 in object storage. */
export async function vodLocation(file: string): Promise<string> {
  const streamName = file.endsWith(".mp4") ? file.slice(0, -4) : file;
  const stream = await streamByName(streamName);
  if (!stream?.options.isVod) throw new AppError("not_found", "no video on demand by that name");
  if (!stream.recordingKey) throw new AppError("not_found", "the video on demand is available once the stream has finished");
  return objects.presignedGetUrl(stream.recordingKey, config.storage.presignExpirySeconds);
}

// ---------------------------------------------------------------- console

/** An account's streams, or every account's when none is given, newest first. */
export async function recentStreams(accountId: string | undefined, limit: number): Promise<Stream[]> {
  return db
    .select()
    .from(streams)
    .where(accountId === undefined ? undefined : eq(streams.accountId, accountId))
    .orderBy(desc(streams.createdAt))
    .limit(limit);
}

/** Viewers of a stream now (0 once it ended) and the most there were at once. */
export async function viewersOf(stream: Stream): Promise<{ current: number; peak: number }> {
  const [current, peak] = await withinRedis(promptRedis(), "reading viewers", () =>
    Promise.all([
      LIVE_STATES.includes(stream.state) ? promptRedis().scard(redisKey("stream", stream.streamName, "viewers")) : 0,
      promptRedis().get(redisKey("stream", stream.streamName, "peak")),
    ]),
  );
  return { current, peak: Number(peak ?? 0) };
}
