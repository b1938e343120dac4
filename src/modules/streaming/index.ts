import { Elysia, t } from "elysia";
import { auth } from "../auth";
import { AppError } from "../../core/errors";
import { ErrorModel, errorResponses } from "../../http/errors";
import { limits } from "../limits";
import { Text } from "../../http/text";
import { callbackAllowed, handleMediaCallback, MEDIA_CALLBACKS } from "./callbacks";
import { startStream, stopStream } from "./control";
import { viewerCount, vodLocation } from "./viewers";

/** Printable, without spaces or control characters (PostgreSQL refuses NUL in text). */
const RoomName = Text({
  minLength: 1,
  maxLength: 256,
  pattern: "^[^\\x00-\\x1f\\x7f]+$",
  description: "Room the recorder joins, in any spelling of its room key (`Design Review`, `design%20review`), optionally @conference.domain",
});
/** Stream names are `<slug>-<hex>`; anything else cannot name one. */
const StreamName = Text({ minLength: 1, maxLength: 128, pattern: "^[A-Za-z0-9._-]+$" });

const NotStarted = t.Object({ started: t.Literal(false) }, { additionalProperties: true });
const StreamFailure = t.Composite([ErrorModel, NotStarted], { additionalProperties: true });

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
    reconnect_window: t.Optional(
      t.Union([Text({ maxLength: 16 }), t.Integer({ minimum: 0 })], { description: "10 ms units: 6000 is one minute (the default)" }),
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
  stop: t.Object({ room_name: RoomName }),
  stopped: t.Object({ started: t.Literal(false), stream_name: t.String(), pod_name: t.String() }),
  viewers: t.Record(t.String(), t.Object({ current_viewers: t.Integer(), uptime: t.Integer({ description: "seconds since the stream started" }) })),
  callbackReply: t.Object({ code: t.Integer() }),
};

const viewerRoute = {
  publicLimit: true,
  params: t.Object({ stream_name: StreamName }),
  response: { 200: StreamingModel.viewers, ...errorResponses(404, 503) },
  detail: { summary: "Current viewers and uptime of a stream" },
};

export const streamingController = new Elysia({ name: "parley.streaming", detail: { tags: ["streaming"] } })
  .use(auth)
  .use(limits)
  .post("/terraform/v1/hooks/srs/startRecording", ({ account, body }) => startStream(account.id, body), {
    apiKey: true,
    limit: "streaming",
    body: StreamingModel.start,
    response: { 200: StreamingModel.started, ...errorResponses(400, 401), 409: StreamFailure, 422: StreamFailure, 503: StreamFailure, 504: StreamFailure },
    detail: { summary: "Start the room's live stream (waits up to 30 s for the recorder)" },
  })
  .post("/terraform/v1/hooks/srs/stopRecording", ({ account, body }) => stopStream(account.id, body.room_name), {
    apiKey: true,
    limit: "streaming",
    body: StreamingModel.stop,
    response: { 200: StreamingModel.stopped, ...errorResponses(400, 401, 404), 503: StreamFailure, 504: StreamFailure },
    detail: { summary: "Stop the room's live stream (waits up to 30 s)" },
  })
  .get("/terraform/v1/hooks/srs/live/viewers/count/:stream_name", ({ params }) => viewerCount(params.stream_name), viewerRoute)
  .get("/llhls/v1/hooks/srs/live/viewers/count/:stream_name", ({ params }) => viewerCount(params.stream_name), viewerRoute)
  .post(
    "/terraform/v1/hooks/srs/:callback",
    async ({ params, body }) => {
      await handleMediaCallback(params.callback, (body ?? {}) as Record<string, unknown>);
      // SRS reads {"code":0} as "allow"; nginx-rtmp only looks at the 2xx status.
      return { code: 0 };
    },
    {
      // The media server proves itself before its callback is validated.
      transform({ query, headers, request, server }) {
        const secret = query.secret ?? headers["x-parley-callback-secret"];
        if (!callbackAllowed(secret, server?.requestIP(request)?.address)) {
          throw new AppError("forbidden", "media-server callbacks need the shared secret from an allowed address");
        }
      },
      params: t.Object({ callback: t.UnionEnum(MEDIA_CALLBACKS) }),
      query: t.Object({ secret: t.Optional(Text({ maxLength: 256 })) }),
      body: t.Optional(t.Record(t.String(), t.Unknown())),
      response: { 200: StreamingModel.callbackReply, ...errorResponses(400, 403, 404, 503) },
      detail: { summary: "Media-server callback (SRS JSON or nginx-rtmp form): publish, play and their ends" },
    },
  )
  .get(
    "/vod/v1/:file",
    async ({ params, redirect }) => redirect(await vodLocation(params.file), 302),
    {
      publicLimit: true,
      params: t.Object({ file: StreamName }),
      response: { 302: t.Void(), ...errorResponses(404, 503) },
      detail: { summary: "The finished stream's MP4 (a redirect to object storage)" },
    },
  );
