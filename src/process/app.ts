/**
 * Builds the Elysia application from the feature controllers, on the services the process's
 * root (root.ts) put in place. Tests import this.
 */
import { Elysia } from "elysia";
import { config } from "../core/config";
import { knowRoutes } from "../http/methods";
import { pipeline } from "../http/pipeline";
import { adminController } from "../modules/admin/routes";
import { consoleController } from "../modules/console/routes";
import { apiReference } from "../modules/console/swagger";
import { conferenceLogController } from "../modules/conference-log/routes";
import { limitHeaders } from "../modules/limits";
import { mapperController } from "../modules/mapper/routes";
import { schedulerController } from "../modules/scheduler/routes";
import { streamingController } from "../modules/streaming/routes";
import { LLHLS_MEDIA_PATH, llhlsMediaRoute } from "../modules/streaming/llhls/route";
import { systemController } from "../modules/system/routes";
import { chatController } from "../modules/chat/routes";
import { chatChannel, rtcChannel } from "../modules/chat/channel";
import { tokenController } from "../modules/token/routes";
import { uploadsController } from "../modules/uploads/routes";
import { usageController } from "../modules/usage/routes";
import { webhooksController } from "../modules/webhooks/routes";
import { eventLogController, eventsChannel } from "../modules/catalogue/routes";
import { realtimeController } from "../realtime/routes";
import { registerChannels } from "../realtime/channel";

/**
 * The socket's channels: `chat:<channel_id>` is a persisted room;
 * `rtc:<channel_id>` relays, storing nothing, to those the room would admit;
 * `events:<account_id>` carries the account's catalogue events.
 */
const channels = [chatChannel, rtcChannel, eventsChannel];

export function createApp() {
  registerChannels(...channels);
  const byApp = (request: Request): Promise<Response> => app.handle(request);
  const app = new Elysia({
    name: "parley",
    normalize: "typebox",
    // Bun closes a socket that sends a larger frame with 1009 (message too big) before reading it.
    websocket: { maxPayloadLength: config.realtime.maxFrameBytes },
    // Every LL-HLS viewer asks the moment a part closes: players' requests are answered
    // by Bun's router directly (src/modules/streaming/llhls/route.ts), the rest by the app.
    serve: { routes: { [LLHLS_MEDIA_PATH]: { GET: llhlsMediaRoute(byApp) } } },
  });
  const built = app
    // Before the pipeline: its error hook writes the body, this one the RateLimit headers of a 429.
    .use(limitHeaders)
    .use(pipeline)
    .use(systemController)
    .use(tokenController)
    .use(mapperController)
    .use(schedulerController)
    .use(streamingController)
    .use(chatController)
    .use(uploadsController)
    .use(realtimeController)
    .use(conferenceLogController)
    .use(eventLogController)
    .use(webhooksController)
    .use(usageController)
    .use(adminController)
    .use(apiReference())
    .use(consoleController);
  // A request with a method its path does not take is answered 405 by the pipeline, from this table.
  knowRoutes(built.routes);
  return built;
}

export type App = ReturnType<typeof createApp>;
