/** Builds the Elysia application from the feature controllers. Tests import this. */
import { swagger } from "@elysiajs/swagger";
import { Elysia } from "elysia";
import { pipeline } from "./http/pipeline";
import { eventsController } from "./modules/events";
import { mapperController } from "./modules/mapper";
import { schedulerController } from "./modules/scheduler";
import { streamingController } from "./modules/streaming";
import { systemController } from "./modules/system";
import { tokenController } from "./modules/token";
import { usageController } from "./modules/usage";

export function createApp() {
  return new Elysia({ name: "parley", normalize: "typebox" })
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
    .use(eventsController)
    .use(usageController);
}

export type App = ReturnType<typeof createApp>;
