import { Elysia, t } from "elysia";
import { auth } from "../auth";
import { AppError } from "../../core/errors";
import { ErrorModel, errorResponses } from "../../http/errors";
import { Text } from "../../http/text";
import { limits } from "../limits";
import { callbackAllowed, handleMediaCallback, MEDIA_CALLBACKS } from "./callbacks";
import { startStream, stopStream } from "./control";
import { StreamName, StreamingModel } from "./model";
import { viewerCount, vodLocation } from "./viewers";

const NotStarted = t.Object({ started: t.Literal(false) }, { additionalProperties: true });
const StreamFailure = t.Composite([ErrorModel, NotStarted], { additionalProperties: true });

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
