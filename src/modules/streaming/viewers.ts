/**
 * Viewers, counted in Redis only (a set per stream, and its peak), and the finished stream's
 * video on demand.
 */
import { config } from "../../core/config";
import { AppError, isDependencyDown } from "../../core/errors";
import { log } from "../../core/log";
import { promptRedis, redisKey, tagged, withinRedis } from "../../queue/connection";
import { objects } from "../../storage/objects";
import { appendEvent } from "../conference-log";
import type { StreamingModel } from "./model";
import { LIVE_STATES, type Stream, streamByName } from "./stream";

// A stream's set and peak are one script's and one transaction's keys: one slot on a Cluster.
const viewersKey = (streamName: string) => redisKey("stream", tagged(streamName), "viewers");
const peakKey = (streamName: string) => redisKey("stream", tagged(streamName), "peak");

// Adds or removes one viewer and keeps the peak, atomically, so API processes never race.
const VIEWER_SCRIPT = `
local changed
if ARGV[1] == 'add' then
  changed = redis.call('SADD', KEYS[1], ARGV[2])
else
  changed = redis.call('SREM', KEYS[1], ARGV[2])
end
local n = redis.call('SCARD', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end
return {changed, n}`;

/** Viewers are counted in Redis only: while it is away a play is allowed and left uncounted. */
export async function changeViewers(stream: Stream, change: "add" | "remove", client: string): Promise<void> {
  const counted = await withinRedis(
    promptRedis(),
    "counting viewers",
    () =>
      promptRedis().eval(
        VIEWER_SCRIPT,
        2,
        viewersKey(stream.streamName),
        peakKey(stream.streamName),
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

/** For a stream that ended: its viewer set is dropped and its peak answered (kept a day). */
export async function takePeakViewers(stream: Stream): Promise<number> {
  const peak = peakKey(stream.streamName);
  // Viewer sets live in Redis only; without it the peak is reported as 0.
  return withinRedis(promptRedis(), "reading the viewer peak", async () => {
    const [[, value]] = (await promptRedis()
      .multi()
      .get(peak)
      .del(viewersKey(stream.streamName))
      .expire(peak, 86_400)
      .exec()) as [[Error | null, string | null]];
    return Number(value ?? 0);
  }).catch(() => 0);
}

export async function viewerCount(streamName: string): Promise<typeof StreamingModel.viewers.static> {
  const stream = await streamByName(streamName);
  if (!stream) throw new AppError("not_found", "no stream by that name");
  // Without Redis the count is unknown: a 503 rather than a made-up number.
  const viewers = LIVE_STATES.includes(stream.state)
    ? await withinRedis(promptRedis(), "counting viewers", () => promptRedis().scard(viewersKey(stream.streamName)))
    : 0;
  const end = stream.stoppedAt?.getTime() ?? Date.now();
  const uptime = stream.startedAt ? Math.max(0, Math.floor((end - stream.startedAt.getTime()) / 1000)) : 0;
  return { [stream.streamName]: { current_viewers: viewers, uptime } };
}

/** A short-lived address of the finished stream's MP4 in object storage. */
export async function vodLocation(file: string): Promise<string> {
  const streamName = file.endsWith(".mp4") ? file.slice(0, -4) : file;
  const stream = await streamByName(streamName);
  if (!stream?.options.isVod) throw new AppError("not_found", "no video on demand by that name");
  if (!stream.recordingKey)
    throw new AppError("not_found", "the video on demand is available once the stream has finished");
  return objects.presignedGetUrl(stream.recordingKey, config.storage.presignExpirySeconds);
}

/** Viewers of a stream now (0 once it ended) and the most there were at once. */
export async function viewersOf(stream: Stream): Promise<{ current: number; peak: number }> {
  const [current, peak] = await withinRedis(promptRedis(), "reading viewers", () =>
    Promise.all([
      LIVE_STATES.includes(stream.state) ? promptRedis().scard(viewersKey(stream.streamName)) : 0,
      promptRedis().get(peakKey(stream.streamName)),
    ]),
  );
  return { current, peak: Number(peak ?? 0) };
}
