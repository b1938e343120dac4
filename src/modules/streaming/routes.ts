import { Elysia, t } from "elysia";
import { config } from "../../core/config";
import { auth } from "../auth";
import { AppError } from "../../core/errors";
import { accepts, FORM_OR_JSON } from "../../http/accepts";
import { ErrorModel, errorResponses } from "../../http/errors";
import { reportMetricLines } from "../../http/metrics";
import { answerOf } from "../../http/openapi";
import { Text } from "../../http/text";
import { HeldResource, limits } from "../limits";
import { callbackAllowed, handleMediaCallback, MEDIA_CALLBACKS } from "./callbacks";
import { startStream, stopStream } from "./control";
import { LlhlsMediaParams, LlhlsQuery, StreamName, StreamingModel } from "./model";
import { recorderMetrics } from "./recorders";
import { viewerCount, vodLocation } from "./viewers";
import { multivariant } from "./llhls/origin";
import { media, mediaAnswer, mediaWaitRefusals, PLAYLIST } from "./llhls/route";
import { isViewerId, newViewerId } from "./llhls/viewers";

/**
 * startRecording and stopRecording wait up to STREAMING_OPERATION_TIMEOUT_MS (30 s) for the
 * recorder, each holding its connection and reading the stream's row twice a second: at the
 * streaming rate of 100 a second, one account could otherwise hold 3,000 (docs/limits.md#caps).
 */
const streamingWaits = new HeldResource({
  resource: "streaming_waits",
  what: "startRecording and stopRecording requests waiting",
  perProcess: { name: "streaming.waits.per_process", cap: () => config.limits.held.streamingWaitsPerProcess },
  callers: [
    {
      name: "streaming.waits.per_account",
      per: "account",
      cap: () => config.limits.held.streamingWaitsPerAccount,
      refusal: 429,
    },
  ],
  retryAfterSeconds: 5,
  free: "wait for one to be answered",
  // Every failure of startRecording says so, as its clients read it.
  extra: { started: false },
});

// Recorder units, the queue's depth by priority and its waits, for autoscalers (docs/scaling.md).
reportMetricLines(recorderMetrics);

/** Runs a start or a stop in one of the account's slots, taken before anything is read or written. */
async function waiting<T>(accountId: string, operation: () => Promise<T>): Promise<T> {
  const release = streamingWaits.take([accountId]);
  try {
    return await operation();
  } finally {
    release();
  }
}

const NotStarted = t.Object({ started: t.Literal(false) }, { additionalProperties: true });
const StreamFailure = t.Composite([ErrorModel, NotStarted], { additionalProperties: true });

const LlhlsMedia = {
  200: t.Any({ description: "playlist (application/vnd.apple.mpegurl) or fMP4 (video/mp4)" }),
  ...errorResponses(400, 404, 503),
};

/** The two LL-HLS bodies: a playlist's text (RFC 8216 with Apple's low-latency tags) and fMP4 media. */
const PLAYLIST_BODY = { type: "string", description: "An M3U8 playlist, beginning #EXTM3U" };
const MP4_BODY = { type: "string", format: "binary", description: "fMP4: init segment, segment or part" };

/**
 * What SRS (JSON) and nginx-rtmp (form) send with a callback: Parley reads the stream's name,
 * the client and which callback it is; the servers' other members are allowed and ignored.
 */
const MediaCallbackBody = t.Object(
  {
    action: t.Optional(Text({ maxLength: 64, description: "SRS: on_publish, on_play, …" })),
    call: t.Optional(Text({ maxLength: 64, description: "nginx-rtmp: publish, play, done, …" })),
    stream: t.Optional(Text({ maxLength: 256, description: "SRS: the stream's name" })),
    name: t.Optional(Text({ maxLength: 256, description: "nginx-rtmp: the stream's name" })),
    app: t.Optional(Text({ maxLength: 256, description: "The RTMP application (live)" })),
    client_id: t.Optional(Text({ maxLength: 256, description: "SRS: the connection's id" })),
    clientid: t.Optional(Text({ maxLength: 256, description: "nginx-rtmp: the connection's id" })),
  },
  { additionalProperties: true },
);

const viewerRoute = {
  publicLimit: true,
  params: t.Object({ stream_name: StreamName }),
  response: { 200: StreamingModel.viewers, ...errorResponses(404, 503) },
  detail: { summary: "Current viewers and uptime of a stream" },
};

export const streamingController = new Elysia({ name: "parley.streaming", detail: { tags: ["streaming"] } })
  .use(auth)
  .use(accepts)
  .use(limits)
  .post(
    "/terraform/v1/hooks/srs/startRecording",
    ({ account, body, set }) =>
      waiting(account.id, async () => {
        const answer = await startStream(account.id, body);
        // Accepted, not done: it starts by itself once a recorder worker has room.
        if (!answer.started) set.status = 202;
        return answer;
      }),
    {
      apiKey: true,
      limit: "streaming",
      body: StreamingModel.start,
      response: {
        200: StreamingModel.started,
        202: StreamingModel.queued,
        ...errorResponses(400, 401),
        409: StreamFailure,
        422: StreamFailure,
        503: StreamFailure,
        504: StreamFailure,
      },
      detail: { summary: "Start the room's live stream (waits up to 30 s for the recorder; 202 when queued)" },
    },
  )
  .post(
    "/terraform/v1/hooks/srs/stopRecording",
    ({ account, body }) => waiting(account.id, () => stopStream(account.id, body.room_name)),
    {
      apiKey: true,
      limit: "streaming",
      body: StreamingModel.stop,
      response: {
        200: StreamingModel.stopped,
        ...errorResponses(400, 401, 404),
        503: StreamFailure,
        504: StreamFailure,
      },
      detail: { summary: "Stop the room's live stream (waits up to 30 s)" },
    },
  )
  .get(
    "/terraform/v1/hooks/srs/live/viewers/count/:stream_name",
    ({ params }) => viewerCount(params.stream_name),
    viewerRoute,
  )
  .get(
    "/llhls/v1/hooks/srs/live/viewers/count/:stream_name",
    ({ params }) => viewerCount(params.stream_name),
    viewerRoute,
  )
  .post(
    "/terraform/v1/hooks/srs/:callback",
    async ({ params, body }) => {
      await handleMediaCallback(params.callback, body ?? {});
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
      // SRS posts JSON, nginx-rtmp a form.
      accepts: FORM_OR_JSON,
      params: t.Object({ callback: t.UnionEnum(MEDIA_CALLBACKS) }),
      query: t.Object({ secret: t.Optional(Text({ maxLength: 256 })) }),
      body: t.Optional(MediaCallbackBody),
      response: { 200: StreamingModel.callbackReply, ...errorResponses(400, 403, 404, 503) },
      detail: { summary: "Media-server callback (SRS JSON or nginx-rtmp form): publish, play and their ends" },
    },
  )
  .get(
    "/llhls/v1/live/:stream",
    async ({ params, query }) => {
      // The path's one segment is `<stream_name>.m3u8`, named `stream` like the rendition routes' first segment.
      const stream = params.stream.slice(0, -".m3u8".length);
      // Each player gets its own id, carried on its media playlist reloads, so it counts as one viewer.
      const viewer = isViewerId(query.viewer) ? query.viewer : newViewerId();
      return media(await multivariant(stream, `?viewer=${viewer}`), PLAYLIST, "private, no-store");
    },
    {
      params: t.Object({
        stream: Text({
          maxLength: 140,
          pattern: "^[A-Za-z0-9._-]+\\.m3u8$",
          examples: ["weekly-5f2c9a1b7e4d03c68a91f2b5d0e7c4a1.m3u8"],
        }),
      }),
      query: LlhlsQuery,
      response: LlhlsMedia,
      detail: {
        summary: "A low-latency stream's multivariant playlist (Apple LL-HLS)",
        responses: { 200: answerOf("The multivariant playlist", { [PLAYLIST]: PLAYLIST_BODY }) },
      },
    },
  )
  .get(
    "/llhls/v1/live/:stream/:rendition/:file",
    // Requests in the form players send are answered before this route, by llhlsMediaRoute (app.ts).
    ({ params, query, request, server }) =>
      mediaAnswer(params.stream, params.rendition, params.file, query, {
        address: server?.requestIP(request)?.address,
        signal: request.signal,
      }),
    {
      params: LlhlsMediaParams,
      query: LlhlsQuery,
      response: LlhlsMedia,
      detail: {
        summary: "A rendition's media playlist (with blocking reload and delta updates), init segment, segment or part",
        responses: {
          200: answerOf("The media playlist (…/index.m3u8), or fMP4 media (init.mp4, a segment, a part)", {
            [PLAYLIST]: PLAYLIST_BODY,
            "video/mp4": MP4_BODY,
          }),
          // A blocking reload or a part waits, under caps on the waits (docs/limits.md#caps).
          ...mediaWaitRefusals(),
        },
      },
    },
  )
  .get("/vod/v1/:file", async ({ params, redirect }) => redirect(await vodLocation(params.file), 302), {
    publicLimit: true,
    params: t.Object({ file: StreamName }),
    response: { 302: t.Void(), ...errorResponses(404, 503) },
    detail: { summary: "The finished stream's MP4 (a redirect to object storage)" },
  });
