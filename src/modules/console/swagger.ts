/**
 * The API reference: the OpenAPI description at /swagger/json (built by src/http/openapi.ts
 * from the routes' models) and its viewer at /swagger, served by Parley itself (swagger-ui
 * from the swagger-ui-dist package), so /swagger works on a machine without internet access.
 */
import { dirname, resolve } from "node:path";
import { Elysia } from "elysia";
import { AppError } from "../../core/errors";
import { describeApi, type RouteToDescribe } from "../../http/openapi";

const distDir = dirname(Bun.resolveSync("swagger-ui-dist/package.json", import.meta.dir));

// Loaded by the @elysiajs/swagger page in place of its CDN viewer. validatorUrl: null stops
// swagger-ui from sending the document to validator.swagger.io.
const BOOT = `(() => {
  const spec = document.getElementById("api-reference")?.dataset.url ?? "swagger/json";
  const style = document.createElement("link");
  style.rel = "stylesheet";
  style.href = "/swagger/assets/swagger-ui.css";
  document.head.append(style);
  const holder = document.createElement("main");
  holder.id = "swagger-ui";
  document.body.append(holder);
  const viewer = document.createElement("script");
  viewer.src = "/swagger/assets/swagger-ui-bundle.js";
  viewer.onload = () => {
    window.ui = SwaggerUIBundle({
      url: new URL(spec, location.href).href,
      dom_id: "#swagger-ui",
      validatorUrl: null,
      deepLinking: true,
    });
  };
  document.body.append(viewer);
})();`;

const PAGE = `<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <title>Parley API</title>
  </head>
  <body>
    <script id="api-reference" data-url="swagger/json"></script>
    <script src="/swagger/assets/viewer.js"></script>
  </body>
</html>`;

/** What the description says around its paths: who Parley is, where it answers, how callers prove who they are. */
const DOCUMENT_BASE = {
  info: {
    title: "Parley",
    version: "1",
    description: "Self-hostable backend for real-time communication apps",
  },
  // Relative: the description is served by the Parley it describes, at whatever address that has.
  servers: [{ url: "/", description: "The Parley that serves this description" }],
  components: {
    securitySchemes: {
      apiKey: {
        type: "apiKey",
        in: "header",
        name: "Authorization",
        description: "The account's API key, raw or after Bearer",
      },
      bearer: { type: "http", scheme: "bearer", bearerFormat: "JWT", description: "A token from generate-token" },
      basic: {
        type: "http",
        scheme: "basic",
        description: "Any username (the account id reads best) and the API key as password",
      },
      operatorToken: {
        type: "http",
        scheme: "bearer",
        bearerFormat: "pop_…",
        description: "An operator token, for the admin API only (docs/admin-api.md)",
      },
    },
  },
};

const ASSETS: Record<string, string> = {
  "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
  "swagger-ui.css": "text/css; charset=utf-8",
};

/** One per app: the description lists the routes of the app it is used in. */
export function apiReference() {
  const reference = new Elysia({ name: "parley.swagger", detail: { hide: true } });
  // Protected in Elysia's types, but what @elysiajs/swagger reads too: once the plugin is
  // used, Elysia points both at the app's own routes and models.
  const app = reference as unknown as {
    getGlobalRoutes(): RouteToDescribe[];
    getGlobalDefinitions(): { type: Record<string, unknown> };
  };
  // Every route is registered by the time anyone asks, so the description is built once.
  let described: Record<string, unknown> | undefined;
  return (
    reference
      .get("/swagger", () => new Response(PAGE, { headers: { "content-type": "text/html; charset=utf-8" } }))
      .get("/swagger/json", () => {
        described ??= describeApi(app.getGlobalRoutes(), app.getGlobalDefinitions().type, DOCUMENT_BASE);
        return described;
      })
      .get(
        "/swagger/assets/viewer.js",
        () => new Response(BOOT, { headers: { "content-type": "text/javascript; charset=utf-8" } }),
      )
      // Browsers ask for /favicon.ico on every page without an icon of its own, /swagger among them: swagger-ui's icon.
      .get(
        "/favicon.ico",
        () =>
          new Response(Bun.file(resolve(distDir, "favicon-32x32.png")), {
            headers: { "content-type": "image/png", "cache-control": "public, max-age=86400" },
          }),
      )
      .get("/swagger/assets/:file", ({ params }) => {
        const type = ASSETS[params.file];
        if (!type) throw new AppError("not_found", "no such asset");
        return new Response(Bun.file(resolve(distDir, params.file)), {
          headers: { "content-type": type, "cache-control": "public, max-age=86400" },
        });
      })
  );
}
