/**
 * The API reference's viewer served by Parley itself (swagger-ui from the swagger-ui-dist
 * package), so /swagger works on a machine without internet access.
 */
import { dirname, resolve } from "node:path";
import { Elysia } from "elysia";
import { AppError } from "../../core/errors";

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

const ASSETS: Record<string, string> = {
  "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
  "swagger-ui.css": "text/css; charset=utf-8",
};

export const swaggerAssets = new Elysia({ name: "parley.swagger-assets", detail: { hide: true } })
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
  });
