/** A stream's row: reading it, and what its name and options make of it (addresses, keys). */
import { randomBytes } from "node:crypto";
import { desc, eq, inArray } from "drizzle-orm";
import { config } from "../../core/config";
import { accountKey } from "../../core/objects";
import { roomAddress } from "../../core/room-key";
import { db } from "../../db/client";
import { BITRATE_LADDER } from "./ladder";
import type { StreamingModel } from "./model";
import { type StreamState, streams } from "./schema";

export type Stream = typeof streams.$inferSelect;

export const LIVE_STATES: StreamState[] = ["starting", "running", "stopping"];
/** A room has at most one stream in these: live, or queued for a recorder worker. */
export const OPEN_STATES: StreamState[] = ["queued", ...LIVE_STATES];

export type StreamStarted = typeof StreamingModel.started.static;

/**
 * The room events and streams are filed under: the key (core/room-key) of the room, without any `@conference.domain`.
 */
export function bareRoom(roomName: string): string {
  return roomName.trim() === "" ? "" : roomAddress(roomName).room;
}

/**
 * Random bits in a stream name. The viewer-count and VOD routes
 * answer anyone who knows a name, so it must not be guessable.
 */
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

export async function getStream(streamId: string): Promise<Stream | undefined> {
  const [stream] = await db.select().from(streams).where(eq(streams.id, streamId));
  return stream;
}

export async function streamByName(streamName: string): Promise<Stream | undefined> {
  const [stream] = await db.select().from(streams).where(eq(streams.streamName, streamName));
  return stream;
}

export async function liveStreams(): Promise<Stream[]> {
  return db.select().from(streams).where(inArray(streams.state, LIVE_STATES));
}

/** An account's streams, or every account's when none is given, newest first. */
export async function recentStreams(accountId: string | undefined, limit: number): Promise<Stream[]> {
  return db
    .select()
    .from(streams)
    .where(accountId === undefined ? undefined : eq(streams.accountId, accountId))
    .orderBy(desc(streams.createdAt))
    .limit(limit);
}
