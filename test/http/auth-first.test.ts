/**
 * Authentication before validation: every route that needs a credential, found from the
 * app's own route list, answers 401 in the error shape to a caller with none or a garbage
 * one, whatever it sends, so an unauthenticated caller learns nothing of the schema.
 * generate-token is the exception: its API key may travel in the body (spec 2.1), so the
 * body is read first.
 */
import { describe, expect, test } from "bun:test";
import { createApp } from "../../src/process/app";
import { app, call } from "../helpers";

interface GuardedRoute {
  method: string;
  path: string;
}

/** Routes whose OpenAPI security names a credential and offers no anonymous alternative. */
function guardedRoutes(): GuardedRoute[] {
  return app.routes
    .filter((route) => {
      const security = (route.hooks as { detail?: { security?: object[] } }).detail?.security;
      return (
        Array.isArray(security) &&
        security.length > 0 &&
        security.every((alternative) => Object.keys(alternative).length > 0)
      );
    })
    .map((route) => ({ method: route.method, path: route.path }));
}

/** Path parameters that fit no schema: integer ids get words, names get a NUL and 10,000 characters. */
const invalidPath = (path: string) =>
  path.replace(/:[a-z_A-Z]+/g, () => encodeURIComponent(`not-valid\u0000${"x".repeat(10_000)}`));

/** A query string no route accepts: wrong types, out-of-range numbers, an empty required term. */
const INVALID_QUERY = "?size=-1&offset=abc&search_term=&group_by_day=maybe&conference=%00";

const CREDENTIALS: Record<string, Record<string, string>> = {
  none: {},
  "empty bearer": { authorization: "Bearer " },
  "garbage bearer": { authorization: "Bearer garbage" },
  "garbage jwt": { authorization: "Bearer aaa.bbb.ccc" },
  "garbage raw key": { authorization: "prl_garbage" },
  "garbage basic": { authorization: `Basic ${btoa("acc:garbage")}` },
  "not a scheme": { authorization: "Digest whatever" },
};

const BODIES: Record<string, { raw: string; contentType: string }> = {
  "wrong shape": { raw: JSON.stringify([1, "two", { three: null }]), contentType: "application/json" },
  "wrong types": {
    raw: JSON.stringify({
      room_name: 7,
      channel_id: [],
      content: {},
      fileName: false,
      mail_owner: 1,
      event_name: "nope",
      reply_message_ids: "x",
    }),
    contentType: "application/json",
  },
  "not JSON": { raw: "{not json", contentType: "application/json" },
  "bad form": { raw: "name=%ZZ&duration=many", contentType: "application/x-www-form-urlencoded" },
};

describe("authentication before validation", () => {
  const routes = guardedRoutes();

  test("the route list holds every guarded family", () => {
    const paths = routes.map((route) => `${route.method} ${route.path}`);
    expect(paths).not.toContain("POST /api/v1/misc/generate-token");
    for (const expected of [
      "POST /api/v1/scheduler/reservation",
      "POST /api/v1/scheduler/conference",
      "GET /api/v1/conference-mapper/conferenceMapper",
      "POST /terraform/v1/hooks/srs/startRecording",
      "POST /api/v1/messaging/rooms/create",
      "PUT /api/v1/messaging/rooms/:channel_id/messages/:message_id",
      "POST /api/v1/misc/get-presigned",
      "POST /api/v1/events/occupant/joined",
      "POST /api/v1/pricing/cdr",
    ]) {
      expect(paths).toContain(expected);
    }
    expect(routes.length).toBeGreaterThanOrEqual(35);
  });

  test("no or garbage credentials with an invalid request answer 401 on every guarded route", async () => {
    const wrong: string[] = [];
    for (const route of routes) {
      const hasBody = route.method !== "GET";
      for (const [credential, headers] of Object.entries(CREDENTIALS)) {
        for (const [bodyName, body] of Object.entries(hasBody ? BODIES : { "no body": undefined })) {
          const answer = await call(route.method, `${invalidPath(route.path)}${INVALID_QUERY}`, {
            headers: { ...headers, ...(body && { "content-type": body.contentType }) },
            raw: body?.raw,
          });
          const shaped =
            typeof answer.body?.error?.code === "string" && typeof answer.body?.error?.message === "string";
          if (answer.status !== 401 || !shaped) {
            wrong.push(
              `${route.method} ${route.path} [${credential}, ${bodyName}]: ` +
                `${answer.status} ${JSON.stringify(answer.body).slice(0, 160)}`,
            );
          }
        }
      }
    }
    expect(wrong).toEqual([]);
  });

  test("the chat socket refuses a missing or garbage token before looking at the rest of the query", async () => {
    const server = createApp().listen({ hostname: "127.0.0.1", port: 0 });
    const upgrade = {
      connection: "Upgrade",
      upgrade: "websocket",
      "sec-websocket-version": "13",
      "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
    };
    try {
      for (const query of ["?vsn=9.9", `?token=${"g".repeat(9_000)}&vsn=9.9`, "?token=garbage&vsn=2.0.0"]) {
        const response = await fetch(`http://127.0.0.1:${server.server!.port}/api/v1/messaging/websocket${query}`, {
          headers: upgrade,
        });
        expect(response.status).toBe(401);
        expect((await response.json()).error.code).toBeString();
      }
    } finally {
      await server.stop(true);
    }
  });
});
