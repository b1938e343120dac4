/** Builds the Elysia application from the feature controllers. Tests import this. */
import { swagger } from "@elysiajs/swagger";
import { Elysia } from "elysia";
import { pipeline } from "./http/pipeline";
import { eventsController } from "./modules/events";
import { systemController } from "./modules/system";
import { tokenController } from "./modules/token";

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
            },
          },
        },
      }),
    )
    .use(systemController)
    .use(tokenController)
    .use(eventsController);
}

export type App = ReturnType<typeof createApp>;
