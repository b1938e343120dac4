/**
 * The streaming wire types, declared once: the routes validate and document them, and the
 * services type what they take and answer from them (`typeof Model.static`).
 */
import { t } from "elysia";
import { Text } from "../../http/text";
import { MAX_PRIORITY } from "./schema";

/** Printable, without spaces or control characters (PostgreSQL refuses NUL in text). */
const RoomName = Text({
  minLength: 1,
  maxLength: 256,
  pattern: "^[^\\x00-\\x1f\\x7f]+$",
  description:
    "Room the recorder joins, in any spelling of its room key (`Design " +
    "Review`, `design%20review`), optionally @conference.domain",
});
/** Stream names are `<slug>-<hex>`; anything else cannot name one. */
export const StreamName = Text({ minLength: 1, maxLength: 128, pattern: "^[A-Za-z0-9._-]+$" });

/** An LL-HLS request's query: the delivery directives of RFC 8216bis and the viewer it counts for. */
export const LlhlsQuery = t.Object({
  _HLS_msn: t.Optional(Text({ maxLength: 20 })),
  _HLS_part: t.Optional(Text({ maxLength: 20 })),
  _HLS_skip: t.Optional(Text({ maxLength: 8 })),
  viewer: t.Optional(Text({ maxLength: 64 })),
});

/** A rendition's address: `/llhls/v1/live/:stream/:rendition/:file`. */
export const LlhlsMediaParams = t.Object({
  stream: StreamName,
  rendition: Text({ maxLength: 8, pattern: "^v[0-9]$", examples: ["v0"] }),
  file: Text({
    maxLength: 40,
    pattern: "^(index\\.m3u8|init\\.mp4|[0-9]{1,12}(\\.[0-9]{1,6})?\\.m4s)$",
    examples: ["index.m3u8"],
  }),
});

export const StreamingModel = {
  start: t.Object({
    room_name: RoomName,
    stream_keys: t.Optional(
      t.Array(
        t.Object({
          key: Text({ minLength: 1, maxLength: 64, description: "Platform name (youtube, facebook, twitch, ...)" }),
          value: Text({ minLength: 1, maxLength: 512, description: "That platform's stream key" }),
        }),
        { maxItems: 16 },
      ),
    ),
    stream_urls: t.Optional(t.Array(Text({ minLength: 1, maxLength: 2048 }), { maxItems: 16 })),
    is_low_latency: t.Optional(t.Boolean()),
    codec: t.Optional(Text({ maxLength: 16, description: "H264 (default) or H265" })),
    is_recording: t.Optional(t.Boolean()),
    multi_bitrate: t.Optional(t.Boolean()),
    is_vod: t.Optional(t.Boolean()),
    username: t.Optional(t.Boolean()),
    audio_only: t.Optional(t.Boolean()),
    layout: t.Optional(Text({ maxLength: 32, description: "mobile, or left out for desktop" })),
    profile: t.Optional(Text({ maxLength: 32, description: "HD, or left out for adaptive" })),
    priority: t.Optional(
      t.Integer({
        minimum: 0,
        maximum: MAX_PRIORITY,
        description:
          "0 (the default) to 9: when no recorder worker has room, " +
          "a start of higher priority is taken from the queue first",
      }),
    ),
    reconnect_window: t.Optional(
      t.Union([Text({ maxLength: 16 }), t.Integer({ minimum: 0 })], {
        description: "10 ms units: 6000 is one minute (the default)",
      }),
    ),
  }),
  started: t.Object({
    started: t.Literal(true),
    stream_name: t.String(),
    pod_name: t.String(),
    hls_url: t.String(),
    low_latency_hls_url: t.String(),
    vod_url: t.String(),
    rtmp_url: t.String(),
    flv_url: t.String(),
  }),
  queued: t.Object({
    started: t.Literal(false),
    queued: t.Literal(true),
    stream_name: t.String(),
    position: t.Integer({ description: "Its place in the queue, 1 first" }),
    estimated_start_s: t.Integer({ description: "A rough guess of the seconds until it starts" }),
  }),
  stop: t.Object({ room_name: RoomName }),
  stopped: t.Object({ started: t.Literal(false), stream_name: t.String(), pod_name: t.String() }),
  viewers: t.Record(
    t.String(),
    t.Object({ current_viewers: t.Integer(), uptime: t.Integer({ description: "seconds since the stream started" }) }),
  ),
  callbackReply: t.Object({ code: t.Integer() }),
};
