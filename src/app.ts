/** Builds the Elysia application from the feature controllers. Tests import this. */
import { swagger } from "@elysiajs/swagger";
import { Elysia } from "elysia";
import { config } from "./config";
import { pipeline } from "./http/pipeline";
import { eventsController } from "./modules/events";
import { mapperController } from "./modules/mapper";
import { schedulerController } from "./modules/scheduler";
import { streamingController } from "./modules/streaming";
import { systemController } from "./modules/system";
import { messagingController } from "./modules/messaging";
import { tokenController } from "./modules/token";
import { uploadsController } from "./modules/uploads";
import { usageController } from "./modules/usage";
import { realtimeController } from "./realtime";

export function createApp() {
  return new Elysia({
    name: "parley",
    normalize: "typebox",
    // Bun closes a socket that sends a larger frame with 1009 (message too big) before reading it.
    websocket: { maxPayloadLength: config.realtime.maxFrameBytes },
  })
    .use(pipeline)
    .use(
      swagger({
        path: "/swagger",
        documentation: {
          info: { title: "Parley", version: "1", description: "Self-hostable backend for real-time communication apps" },
          components: {
            securitySchemes: {
              apiKey: { type: "apiKey", in: "header", name: "Authorization", description: "The account's API key, raw or after Bearer" },
              bearer: { type: "http", scheme: "bearer", bearerFormat: "JWT", description: "A token from generate-token" },
              basic: { type: "http", scheme: "basic", description: "Any username (the account id reads best) and the API key as password" },
            },
          },
        },
      }),
    )
    .use(systemController)
    .use(tokenController)
    .use(mapperController)
    .use(schedulerController)
    .use(streamingController)
    .use(messagingController)
    .use(uploadsController)
    .use(eventsController)
    .use(usageController)
    // Last: its scoped resolve (the socket's ?token=) applies to every route registered after it.
    .use(realtimeController);
}

export type App = ReturnType<typeof createApp>;
