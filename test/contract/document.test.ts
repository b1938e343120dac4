/**
 * The OpenAPI description at /swagger/json, read with tools nobody here wrote: swagger-parser
 * validates it as OpenAPI 3.1, Redocly's recommended ruleset finds no error in it, and it
 * says what Parley sends: the content types, the one error schema, numbers as numbers.
 */
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import SwaggerParser from "@apidevtools/swagger-parser";
import { call } from "../helpers";

const ROOT = resolve(import.meta.dir, "../..");

async function described() {
  const answer = await call("GET", "/swagger/json");
  expect(answer.status).toBe(200);
  return answer.body;
}

type Json = Record<string, any>;

/** Every operation of the document as `METHOD path` with its object. */
function operations(doc: Json): Array<[string, Json]> {
  return Object.entries(doc.paths as Json).flatMap(([path, item]) =>
    Object.entries(item as Json).map(([method, operation]): [string, Json] => [
      `${method.toUpperCase()} ${path}`,
      operation as Json,
    ]),
  );
}

describe("the published OpenAPI description", () => {
  test("swagger-parser validates it as OpenAPI 3.1", async () => {
    const doc = await described();
    expect(doc.openapi).toBe("3.1.0");
    await SwaggerParser.validate(structuredClone(doc));
  });

  test("Redocly's recommended ruleset reports no error", async () => {
    const folder = mkdtempSync(join(tmpdir(), "parley-openapi-"));
    try {
      const file = join(folder, "openapi.json");
      writeFileSync(file, JSON.stringify(await described()));
      // Redocly's CLI is a Node program; run from the repository so it reads redocly.yaml there.
      const linted = Bun.spawnSync(
        ["node", join(ROOT, "node_modules/@redocly/cli/bin/cli.js"), "lint", file, "--format=json"],
        { cwd: ROOT, stderr: "pipe" },
      );
      const report = JSON.parse(linted.stdout.toString());
      const errors = report.problems.filter((problem: Json) => problem.severity === "error");
      expect(errors.map((problem: Json) => `${problem.ruleId}: ${problem.location?.[0]?.pointer}`)).toEqual([]);
      expect(report.totals.errors).toBe(0);
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  }, 60_000);

  test("every answer has a description and only the content types Parley sends", async () => {
    const doc = await described();
    const sent = new Set([
      "application/json",
      "text/event-stream",
      "text/csv",
      "application/x-pem-file",
      "application/vnd.apple.mpegurl",
      "video/mp4",
    ]);
    for (const [name, operation] of operations(doc)) {
      for (const [status, answer] of Object.entries(operation.responses as Json)) {
        expect({ name, status, description: typeof answer.description }).toEqual({
          name,
          status,
          description: "string",
        });
        for (const type of Object.keys(answer.content ?? {}))
          expect({ name, status, type, sent: sent.has(type) }).toEqual({ name, status, type, sent: true });
        if (Number(status) >= 400 && answer.content?.["application/json"]?.schema?.$ref) {
          expect(answer.content["application/json"].schema.$ref).toBe("#/components/schemas/Error");
        }
      }
    }
    expect(doc.paths["/api/v1/webhooks/{id}"].delete.responses["204"].description).toBeString();
  });

  test("the routes that send other than JSON, or take forms, say so", async () => {
    const doc = await described();
    const typesOf = (path: string, method: string, status: string) =>
      Object.keys(doc.paths[path][method].responses[status].content).sort();
    expect(typesOf("/llhls/v1/live/{stream}", "get", "200")).toEqual(["application/vnd.apple.mpegurl"]);
    expect(typesOf("/llhls/v1/live/{stream}/{rendition}/{file}", "get", "200")).toEqual([
      "application/vnd.apple.mpegurl",
      "video/mp4",
    ]);
    expect(typesOf("/api/v1/jitsi/asap-keys/{file}", "get", "200")).toEqual(["application/x-pem-file"]);
    expect(typesOf("/api/v1/pricing/cdr", "post", "200")).toEqual(["application/json", "text/csv"]);
    expect(typesOf("/api/v1/events/stream", "get", "200")).toEqual(["text/event-stream"]);
    const bodyTypes = (path: string) => Object.keys(doc.paths[path].post.requestBody.content).sort();
    expect(bodyTypes("/api/v1/scheduler/conference")).toEqual([
      "application/json",
      "application/x-www-form-urlencoded",
    ]);
    expect(bodyTypes("/terraform/v1/hooks/srs/{callback}")).toEqual([
      "application/json",
      "application/x-www-form-urlencoded",
    ]);
    expect(bodyTypes("/api/v1/webhooks")).toEqual(["application/json"]);
  });

  test("each route lists the errors its guard, limit and input can cause", async () => {
    const doc = await described();
    const statuses = (path: string, method: string) => Object.keys(doc.paths[path][method].responses);
    // API key, path parameter, no limit: 400, 401, 404, 503.
    expect(statuses("/api/v1/webhooks/{id}", "get")).toEqual(["200", "400", "401", "404", "503"]);
    // Token guard (scope: 403), a body, the messaging limit.
    expect(statuses("/api/v1/messaging/rooms/create", "post")).toEqual(
      expect.arrayContaining(["400", "401", "403", "413", "415", "429", "503"]),
    );
    // Public, limited per address.
    expect(statuses("/terraform/v1/hooks/srs/live/viewers/count/{stream_name}", "get")).toContain("429");
    // Even a route without parameters refuses a query string PostgreSQL could not store.
    expect(statuses("/healthz", "get")).toEqual(["200", "400"]);
    expect((await call("GET", "/healthz?a=%00")).status).toBe(400);
    for (const [name, operation] of operations(doc))
      expect({ name, has500: "500" in operation.responses }).toEqual({ name, has500: false });
  });

  test("the error code is one of the server's codes", async () => {
    const doc = await described();
    const codes = doc.components.schemas.Error.properties.error.properties.code.enum;
    expect(codes).toContain("token_expired");
    expect(codes).toContain("rate_limited");
    expect(codes).not.toContain("no_such_code");
  });

  test("ids and counters are integers, not string | number", async () => {
    const doc = await described();
    const text = JSON.stringify(doc);
    expect(text).not.toContain('"format":"integer"');
    const reservation =
      doc.paths["/api/v1/scheduler/reservation/{id}"].get.responses["200"].content["application/json"];
    expect(reservation.schema.properties.id.type).toBe("integer");
    const events = doc.paths["/api/v1/events"].get;
    const after = events.parameters.find((parameter: Json) => parameter.name === "after");
    expect(after.schema.type).toBe("integer");
  });

  test("paths are spelled as the docs spell them, and the JWKS and the socket are described", async () => {
    const doc = await described();
    expect(Object.keys(doc.paths).filter((path) => path.length > 1 && path.endsWith("/"))).toEqual([]);
    expect(doc.paths["/api/v1/events"]).toBeDefined();
    expect(doc.paths["/api/v1/webhooks"]).toBeDefined();
    expect(doc.paths["/.well-known/jwks.json"].get.responses["200"]).toBeDefined();
    const socket = doc.paths["/api/v1/messaging/websocket"].get;
    expect(Object.keys(socket.responses)).toContain("101");
    expect(socket.parameters.map((parameter: Json) => parameter.name).sort()).toEqual(["token", "vsn"]);
  });
});
