/**
 * Hostile strings at every string field of every route (body, query and path, found from the
 * routes' own schemas): NUL, an unpaired high or low surrogate, and a very long string. Each
 * is refused with a 4xx in the error shape that names the field, never a 5xx, with valid
 * credentials so the request reaches validation. The chat socket refuses them too.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createApp } from "../../src/process/app";
import { app, call, newAccount, tokenFor } from "../helpers";
import { connect, disconnect, join, push } from "../support/phoenix";

type Schema = {
  type?: string;
  properties?: Record<string, Schema>;
  items?: Schema;
  anyOf?: Schema[];
  enum?: unknown[];
  const?: unknown;
  format?: string;
  pattern?: string;
  examples?: unknown[];
  minimum?: number;
};

/**
 * A string a client writes as text. Elysia also types numbers and booleans of the query and
 * path as unions with a string of a coercing format ("numeric", "boolean"): those are not text.
 */
const isText = (schema: Schema) =>
  schema.type === "string" &&
  !schema.enum &&
  schema.const === undefined &&
  [undefined, "text", "email", "uri", "date-time"].includes(schema.format);

/** A value the schema accepts, with every optional member present so their strings are reached. */
function sample(schema: Schema): unknown {
  if (schema.const !== undefined) return schema.const;
  if (schema.enum) return schema.enum[0];
  if (schema.anyOf)
    return sample(schema.anyOf.find((member) => member.type !== "string" || isText(member)) ?? schema.anyOf[0]!);
  switch (schema.type) {
    case "object":
      return Object.fromEntries(Object.entries(schema.properties ?? {}).map(([key, member]) => [key, sample(member)]));
    case "array":
      return schema.items ? [sample(schema.items)] : [];
    case "string":
      if (schema.examples?.length) return schema.examples[0];
      if (schema.format === "email") return "user@example.com";
      if (schema.format === "uri") return "https://example.com/a.png";
      if (schema.format === "date-time") return "2030-01-01T00:00:00Z";
      return "abc";
    case "integer":
    case "number":
      return Math.max(1, schema.minimum ?? 1);
    case "boolean":
      return false;
    default:
      return undefined;
  }
}

/** Paths to every string leaf (free-text strings, not enums or literals). */
function stringPaths(schema: Schema, path: string[] = []): string[][] {
  if (schema.const !== undefined || schema.enum) return [];
  if (schema.anyOf) return schema.anyOf.some(isText) ? [path] : stringPaths(schema.anyOf[0]!, path);
  if (schema.type === "string") return isText(schema) ? [path] : [];
  if (schema.type === "object")
    return Object.entries(schema.properties ?? {}).flatMap(([key, member]) => stringPaths(member, [...path, key]));
  if (schema.type === "array" && schema.items) return stringPaths(schema.items, [...path, "0"]);
  return [];
}

function withValue(base: unknown, path: string[], value: string): unknown {
  const copy = structuredClone(base) as Record<string, unknown>;
  let node: Record<string, unknown> = copy;
  for (const key of path.slice(0, -1)) node = node[key] as Record<string, unknown>;
  node[path.at(-1)!] = value;
  return copy;
}

const HOSTILE: Record<string, { json: string; url: string }> = {
  NUL: { json: "a\u0000b", url: "a%00b" },
  "lone high surrogate": { json: "a\uD800b", url: "a%ED%A0%80b" },
  "lone low surrogate": { json: "a\uDC00b", url: "a%ED%B0%80b" },
  "very long": { json: "x".repeat(100_000), url: "x".repeat(10_000) },
};

describe("hostile strings", () => {
  let credentials: Record<string, Record<string, string>>;
  let accountId: string;

  beforeAll(async () => {
    const account = await newAccount();
    accountId = account.accountId;
    const token = await tokenFor(account.apiKey);
    credentials = {
      apiKey: { authorization: account.apiKey },
      bearer: { authorization: `Bearer ${token}` },
      basic: { authorization: `Bearer ${account.apiKey}` },
      none: {},
    };
  });

  function credentialFor(route: (typeof app.routes)[number]): Record<string, string> {
    const security = (route.hooks as { detail?: { security?: object[] } }).detail?.security ?? [];
    const scheme = Object.keys(security[0] ?? {})[0];
    return credentials[scheme === "apiKey" ? "apiKey" : scheme === "bearer" ? "bearer" : "none"]!;
  }

  test("every string field of every route refuses them with a 4xx naming the field", async () => {
    const wrong: string[] = [];
    let cases = 0;
    for (const route of app.routes) {
      if (route.method === "WS" || route.path.startsWith("/swagger")) continue;
      const hooks = route.hooks as { body?: Schema; query?: Schema; params?: Schema };
      const params = (hooks.params ? sample(hooks.params) : {}) as Record<string, string>;
      if ("accountId" in params) params.accountId = accountId;
      const query = (hooks.query ? sample(hooks.query) : {}) as Record<string, unknown>;
      const body = hooks.body ? sample(hooks.body) : undefined;
      const targets: Array<{ where: "body" | "query" | "params"; path: string[] }> = [
        ...(hooks.body ? stringPaths(hooks.body).map((path) => ({ where: "body" as const, path })) : []),
        ...(hooks.query ? stringPaths(hooks.query).map((path) => ({ where: "query" as const, path })) : []),
        ...(hooks.params ? stringPaths(hooks.params).map((path) => ({ where: "params" as const, path })) : []),
      ];
      for (const target of targets) {
        for (const [name, hostile] of Object.entries(HOSTILE)) {
          cases++;
          const field = target.path.join(".");
          const pathParams = target.where === "params" ? { ...params, [field]: hostile.url } : params;
          const url = route.path.replace(/:([a-zA-Z_]+)/g, (_, key: string) =>
            target.where === "params" && key === field ? hostile.url : encodeURIComponent(String(pathParams[key])),
          );
          const search = new URLSearchParams(
            Object.entries(query)
              .filter(([key, value]) => value !== undefined && !(target.where === "query" && key === field))
              .map(([key, value]) => [key, String(value)]),
          ).toString();
          const hostileQuery = target.where === "query" ? `${search ? "&" : ""}${field}=${hostile.url}` : "";
          const answer = await call(route.method, `${url}?${search}${hostileQuery}`, {
            headers: credentialFor(route),
            ...(body !== undefined && {
              body: target.where === "body" ? withValue(body, target.path, hostile.json) : body,
            }),
          });
          const shaped =
            typeof answer.body?.error?.code === "string" && typeof answer.body?.error?.message === "string";
          const guardRefused = answer.status === 401 || answer.status === 403;
          // A union's report may stop at the union (all_occupants, an array or an object).
          const message = String(answer.body?.error?.message ?? "");
          const named = guardRefused || target.path.some((segment) => segment !== "0" && message.includes(segment));
          // A URL carries UTF-8, where no lone surrogate can be written: Elysia keeps an
          // undecodable query escape verbatim, which is plain storable text.
          if (target.where === "query" && name.startsWith("lone") && answer.status < 500) continue;
          if (answer.status < 400 || answer.status >= 500 || !shaped || !named) {
            wrong.push(
              `${route.method} ${route.path} ${target.where}.${field} [${name}]: ` +
                `${answer.status} ${JSON.stringify(answer.body).slice(0, 200)}`,
            );
          }
        }
      }
    }
    expect(wrong).toEqual([]);
    expect(cases).toBeGreaterThan(200);
  });

  test("the public dial-in route refuses a NUL in the conference with no credential at all", async () => {
    const answer = await call(
      "GET",
      `/api/v1/conference-mapper/${accountId}/conferenceMapper?conference=a%00b@conference.meet.example.com`,
    );
    expect(answer.status).toBe(400);
    expect(answer.body.error).toEqual({ code: "bad_request", message: expect.stringContaining("query.conference") });
  });

  test("a forged token whose key id holds a NUL is refused as a token, before any lookup", async () => {
    const part = (value: object) => Buffer.from(JSON.stringify(value)).toString("base64url");
    const forged = `${part({ alg: "EdDSA", kid: "k\u0000" })}.${part({ sub: "x" })}.c2ln`;
    const answer = await call("GET", "/api/v1/messaging/rooms", { headers: { authorization: `Bearer ${forged}` } });
    expect(answer.status).toBe(401);
    expect(answer.body.error.code).toBe("invalid_token");
  });

  describe("on the chat socket", () => {
    const server = createApp().listen({ hostname: "127.0.0.1", port: 0 });
    let socket: ReturnType<typeof connect>;

    beforeAll(async () => {
      const account = await newAccount();
      const token = await tokenFor(account.apiKey, { id: "alice", name: "Alice" }, "messaging");
      const created = await call("POST", "/api/v1/messaging/rooms/create", {
        headers: { authorization: `Bearer ${token}` },
        body: { channel_id: "hostile" },
      });
      expect(created.status).toBe(201);
      socket = connect(`ws://127.0.0.1:${server.server!.port}`, token);
    });

    afterAll(async () => {
      await disconnect(socket);
      await server.stop(true);
    });

    test("a push or topic with NUL or a lone surrogate gets an error naming it; the socket lives on", async () => {
      const channel = socket.channel("chat:hostile", {});
      await join(channel);
      for (const content of ["a\u0000b", "a\uD800b", "a\uDC00b"]) {
        const reply = await push(channel, "new_message", { content });
        expect(reply).toEqual({
          status: "error",
          response: { reason: "bad_request", message: expect.stringContaining("payload.content") },
        });
      }
      const refused = await join(socket.channel("chat:a\u0000b", {})).catch(
        (error: { response?: unknown }) => error.response,
      );
      expect(refused).toEqual({ reason: "bad_request", message: expect.stringContaining("topic") });
      expect((await push(channel, "new_message", { content: "still here" })).status).toBe("ok");
    });
  });
});
