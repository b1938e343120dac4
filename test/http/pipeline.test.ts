import { describe, expect, test } from "bun:test";
import { renderMetrics } from "../../src/http/metrics";
import { ADMIN_PREFIX } from "../../src/modules/admin/routes";
import { createOperatorToken } from "../../src/modules/admin/tokens";
import { EVENT_TYPES } from "../../src/modules/catalogue";
import { app, call, newAccount } from "../helpers";

const operator = { operator: { kind: "local" as const, name: "local:test", scope: "full" as const }, address: "t" };

describe("request pipeline", () => {
  test("every response carries a request id, the caller's when it is sane", async () => {
    const generated = await call("GET", "/healthz");
    expect(generated.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
    const echoed = await call("GET", "/healthz", { headers: { "x-request-id": "trace-42" } });
    expect(echoed.headers.get("x-request-id")).toBe("trace-42");
    const replaced = await call("GET", "/healthz", { headers: { "x-request-id": "bad id with spaces" } });
    expect(replaced.headers.get("x-request-id")).not.toBe("bad id with spaces");
  });

  test("unknown routes answer 404 in the error shape", async () => {
    const answer = await call("GET", "/api/v1/nothing-here");
    expect(answer.status).toBe(404);
    expect(answer.body).toEqual({ error: { code: "not_found", message: "no such route" } });
  });

  test("an oversized body is checked after the credential: 401 without one, 413 with one", async () => {
    const { apiKey } = await newAccount();
    const token = (await createOperatorToken(operator, `big-${crypto.randomUUID().slice(0, 6)}`, "full")).token;
    const oversized = (authorization?: string) => ({
      raw: "{}",
      headers: {
        "content-type": "application/json",
        "content-length": String(50 * 1024 * 1024),
        ...(authorization && { authorization }),
      },
    });
    const routes = [
      ["POST", `${ADMIN_PREFIX}/accounts`, `Bearer ${token}`],
      ["POST", "/api/v1/webhooks", apiKey],
      ["POST", "/api/v1/scheduler/conference", apiKey],
    ] as const;
    for (const [method, path, credential] of routes) {
      const anonymous = await call(method, path, oversized());
      expect([path, anonymous.status]).toEqual([path, 401]);
      const garbage = await call(method, path, oversized("Bearer pop_garbage"));
      expect([path, garbage.status]).toEqual([path, 401]);
      const known = await call(method, path, oversized(credential));
      expect([path, known.status, known.body.error.code]).toEqual([path, 413, "payload_too_large"]);
      // Sent without a length (chunked), it is read only until it passes the limit, then judged the same way.
      const chunked = (authorization?: string) =>
        app.handle(
          new Request(`http://parley.test${path}`, {
            method,
            headers: { "content-type": "application/json", ...(authorization && { authorization }) },
            body: new Blob([`{"name":"${"x".repeat(2 * 1024 * 1024)}"}`]).stream(),
          }),
        );
      expect([path, (await chunked()).status]).toEqual([path, 401]);
      expect([path, (await chunked(credential)).status]).toEqual([path, 413]);
    }
  });

  test("a non-empty body of a type the route does not take is 415, whatever its schema", async () => {
    const { apiKey } = await newAccount();
    const asForm = (raw: string, authorization?: string) => ({
      raw,
      headers: { "content-type": "application/x-www-form-urlencoded", ...(authorization && { authorization }) },
    });
    // curl -d: JSON under curl's form type, to a route whose every field is optional.
    const token = await call(
      "POST",
      "/api/v1/misc/generate-token",
      asForm(`{"apiKey":"${apiKey}","user":{"id":"bob","name":"Bob"},"scope":"messaging","exp":"5m"}`, apiKey),
    );
    expect(token.status).toBe(415);
    expect(token.body.error).toEqual({
      code: "unsupported_media_type",
      message:
        "the body is JSON but came with content-type: application/x-www-form-urlencoded; " +
        "send it with content-type: application/json",
    });
    const created = await call("POST", "/api/v1/webhooks", {
      headers: { authorization: apiKey },
      body: { url: "http://localhost:9/" },
    });
    const id = created.body.endpoint.id;
    const patched = await call("PATCH", `/api/v1/webhooks/${id}`, asForm("enabled=false", apiKey));
    expect([patched.status, patched.body.error.message]).toEqual([
      415,
      "the body came with content-type: application/x-www-form-urlencoded; this route takes application/json",
    ]);
    expect((await call("GET", `/api/v1/webhooks/${id}`, { headers: { authorization: apiKey } })).body.enabled).toBe(
      true,
    );
    const cdr = await call("POST", "/api/v1/pricing/cdr", asForm("from=2030-01-01&to=2030-02-01", `Bearer ${apiKey}`));
    expect(cdr.status).toBe(415);
    for (const contentType of ["text/plain", "multipart/form-data; boundary=x", "application/xml"]) {
      const answer = await call("POST", "/api/v1/misc/generate-token", {
        raw: `--x\r\n<a/>`,
        headers: { authorization: apiKey, "content-type": contentType },
      });
      expect([contentType, answer.status, answer.body.error?.code]).toEqual([
        contentType,
        415,
        "unsupported_media_type",
      ]);
    }
    // An empty body is no body, and Prosody's form keeps working where forms are taken.
    const empty = await call("POST", "/api/v1/misc/generate-token", asForm("", apiKey));
    expect(empty.status).toBe(200);
    const conference = await call(
      "POST",
      "/api/v1/scheduler/conference",
      asForm(`name=form${Date.now()}&start_time=${new Date().toISOString()}&mail_owner=owner@example.com`, apiKey),
    );
    expect(conference.status).toBe(200);
  });

  test("a path with another method than its routes take is 405, with Allow, in the error shape", async () => {
    const wrong = await call("GET", "/api/v1/misc/generate-token");
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get("allow")).toBe("POST");
    expect(wrong.body).toEqual({
      error: {
        code: "method_not_allowed",
        message: "GET is not served on /api/v1/misc/generate-token; it answers POST",
      },
    });
    // A path with a parameter, served with two methods.
    const put = await call("PUT", "/api/v1/scheduler/reservation/123");
    expect(put.status).toBe(405);
    expect(put.headers.get("allow")).toBe("DELETE, GET");
    // A method the path does take still reaches its route; an unknown path is still 404.
    expect((await call("POST", "/api/v1/misc/generate-token", { body: {} })).status).toBe(401);
    expect((await call("DELETE", "/api/v1/nothing-here")).status).toBe(404);
  });

  test("a declared oversized body is 413 in the error shape", async () => {
    const answer = await call("POST", "/api/v1/misc/generate-token", {
      raw: "{}",
      headers: { "content-type": "application/json", "content-length": String(50 * 1024 * 1024) },
    });
    expect(answer.status).toBe(413);
    expect(answer.body.error.code).toBe("payload_too_large");
  });

  test("JSON sent as a form, as text or without a content type is told the content type expected", async () => {
    const { apiKey } = await newAccount();
    const reservation = JSON.stringify({
      name: "typed",
      mail_owner: "owner@example.com",
      start_time: "2030-01-01T10:00:00Z",
      duration: 60,
    });
    for (const contentType of ["application/x-www-form-urlencoded", "text/plain;charset=UTF-8"]) {
      const answer = await call("POST", "/api/v1/scheduler/reservation", {
        raw: reservation,
        headers: { authorization: apiKey, "content-type": contentType },
      });
      expect(answer.status).toBe(415);
      expect(answer.body.error).toEqual({
        code: "unsupported_media_type",
        message:
          `the body is JSON but came with content-type: ${contentType}; ` +
          "send it with content-type: application/json",
      });
    }
    // A byte body carries no content type of its own.
    const bare = await app.handle(
      new Request("http://parley.test/api/v1/scheduler/reservation", {
        method: "POST",
        headers: { authorization: apiKey },
        body: new TextEncoder().encode(reservation),
      }),
    );
    expect(bare.status).toBe(415);
    expect((await bare.json()).error.message).toBe(
      "the body is JSON but came without a content-type; send it with content-type: application/json",
    );
    // A form that is a form is judged by the schema as before where forms are taken.
    const form = await call("POST", "/api/v1/scheduler/reservation", {
      raw: "name=typed",
      headers: { authorization: apiKey, "content-type": "application/x-www-form-urlencoded" },
    });
    expect(form.status).toBe(400);
    expect(form.body.error.message).toContain("mail_owner");
  });

  test("a value outside a list is answered with the allowed values, also inside a union", async () => {
    const { apiKey } = await newAccount();
    const answer = await call("POST", "/api/v1/webhooks", {
      body: { url: "https://example.com/hook", event_types: ["room.started", "room.bogus"] },
      headers: { authorization: apiKey },
    });
    expect(answer.status).toBe(400);
    expect(answer.body.error.message).toBe(`event_types.1: "room.bogus" is not one of: ${EVENT_TYPES.join(", ")}`);
    const listed = await call("GET", "/api/v1/webhooks/wh_none/deliveries?status=lost", {
      headers: { authorization: apiKey },
    });
    expect(listed.status).toBe(400);
    expect(listed.body.error.message).toBe('query.status: "lost" is not one of: pending, succeeded, failed');
  });

  test("/metrics counts requests per route and status, with latency histograms and queue depths", async () => {
    const { apiKey } = await newAccount();
    await call("POST", "/api/v1/misc/generate-token", { body: { apiKey } });
    await call("POST", "/api/v1/misc/generate-token", { body: { apiKey: "prl_unknown" } });
    // The response hook runs after the answer is sent; give it a moment.
    await Bun.sleep(20);
    const text = await renderMetrics();
    expect(text).toMatch(
      /parley_http_requests_total\{method="POST",route="\/api\/v1\/misc\/generate-token",status="200"\} [1-9]/,
    );
    expect(text).toMatch(
      /parley_http_requests_total\{method="POST",route="\/api\/v1\/misc\/generate-token",status="401"\} [1-9]/,
    );
    expect(text).toContain(
      'parley_http_request_duration_seconds_bucket{method="POST",route="/api/v1/misc/generate-token",le="+Inf"}',
    );
    expect(text).toMatch(/parley_queue_jobs\{queue="recorder",state="waiting"\} \d+/);
    // Not on the public API: on a listener of its own (test/started-parley.test.ts).
    expect((await call("GET", "/metrics")).status).toBe(404);
  });

  test("the OpenAPI document describes the token route with its schemas and errors", async () => {
    const doc = (await call("GET", "/swagger/json")).body;
    const route = doc.paths["/api/v1/misc/generate-token"].post;
    expect(Object.keys(route.responses)).toEqual(expect.arrayContaining(["200", "400", "401", "422"]));
    expect(route.requestBody).toBeDefined();
    expect(doc.components.securitySchemes.apiKey).toBeDefined();
  });
});
