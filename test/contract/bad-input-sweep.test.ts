/**
 * Every operation of the served description, asked wrongly in the ways a stranger's sweep
 * asks: no credential, a credential of the wrong kind, a path parameter nothing has, a query
 * string PostgreSQL cannot store, and bodies that are not JSON, not valid, too large or
 * empty. Each answer's status must be one the operation declares, and its content type one
 * declared for that status.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import { app, call, newAccount, tokenFor } from "../helpers";

type Json = Record<string, any>;

interface Asked {
  what: string;
  headers?: Record<string, string>;
  query?: string;
  raw?: string;
  pathValue?: string;
}

let doc: Json;
let apiKey: string;
/** A token whose scope covers neither messaging nor the platform. */
let narrowToken: string;

beforeAll(async () => {
  doc = (await call("GET", "/swagger/json")).body;
  ({ apiKey } = await newAccount("RS256"));
  narrowToken = await tokenFor(apiKey, { id: "sweeper", name: "Sweeper" }, "media");
});

function askings(method: string, operation: Json): Asked[] {
  const json = { "content-type": "application/json" };
  const asked: Asked[] = [
    { what: "no credential" },
    { what: "an unstorable query string", query: "?sweep=%00" },
    { what: "an API key, a path parameter nothing has", headers: { authorization: `Bearer ${apiKey}` } },
    { what: "a token of another scope", headers: { authorization: `Bearer ${narrowToken}` } },
    { what: "a path parameter too long", headers: { authorization: `Bearer ${apiKey}` }, pathValue: "x".repeat(300) },
  ];
  // Every route, whatever it takes: a declared length over the limit, and (where a body may
  // come) a body of a type it does not take.
  asked.push({
    what: "a Content-Length over the limit",
    headers: { authorization: `Bearer ${apiKey}`, "content-length": String(64 * 1024 * 1024) },
  });
  if (method !== "get") {
    asked.push({
      what: "a body of a type no route takes",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/x-sweep" },
      raw: "sweep",
    });
  }
  if (operation.requestBody) {
    const key = { authorization: `Bearer ${apiKey}` };
    asked.push(
      { what: "an empty JSON object", headers: { ...key, ...json }, raw: "{}" },
      { what: "broken JSON", headers: { ...key, ...json }, raw: "{" },
      { what: "JSON as text/plain", headers: { ...key, "content-type": "text/plain" }, raw: '{"a":1}' },
      { what: "a wrong type", headers: { ...key, ...json }, raw: "[1,2]" },
      {
        what: "a body over the limit",
        headers: { ...key, ...json, "content-length": String(64 * 1024 * 1024) },
        raw: "{}",
      },
    );
  }
  return asked;
}

describe("every operation, asked wrongly, answers only what it declares", () => {
  test("no undeclared status or content type", async () => {
    const undeclared: string[] = [];
    let asked = 0;
    for (const [path, item] of Object.entries(doc.paths as Json)) {
      for (const [method, operation] of Object.entries(item as Json)) {
        // The socket's upgrade needs a WebSocket client: test/realtime covers its refusals.
        if (path === "/api/v1/messaging/websocket") continue;
        for (const asking of askings(method, operation)) {
          const filled = path.replace(/\{[^}]+\}/g, asking.pathValue ?? "sweep-1");
          // Only the status and headers are read: the event stream's body never ends.
          const answer = await app.handle(
            new Request(`http://parley.test${filled}${asking.query ?? ""}`, {
              method: method.toUpperCase(),
              headers: asking.headers,
              body: asking.raw,
            }),
          );
          await answer.body?.cancel();
          asked++;
          const declared = operation.responses[String(answer.status)];
          const type = answer.headers.get("content-type")?.split(";")[0]?.trim();
          const where = `${method.toUpperCase()} ${path} with ${asking.what}: ${answer.status}`;
          if (!declared) undeclared.push(`${where} is not declared`);
          else if (type && declared.content && !(type in declared.content))
            undeclared.push(`${where} sent ${type}, declared ${Object.keys(declared.content).join(", ")}`);
        }
      }
    }
    console.log(`bad-input sweep: ${asked} requests`);
    expect(undeclared).toEqual([]);
  }, 120_000);
});
