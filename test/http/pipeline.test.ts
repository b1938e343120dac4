import { describe, expect, test } from "bun:test";
import { renderMetrics } from "../../src/http/metrics";
import { call, newAccount } from "../helpers";

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

  test("a declared oversized body is 413 in the error shape", async () => {
    const answer = await call("POST", "/api/v1/misc/generate-token", {
      raw: "{}",
      headers: { "content-type": "application/json", "content-length": String(50 * 1024 * 1024) },
    });
    expect(answer.status).toBe(413);
    expect(answer.body.error.code).toBe("payload_too_large");
  });

  test("/metrics counts requests per route and status, with latency histograms and queue depths", async () => {
    const { apiKey } = await newAccount();
    await call("POST", "/api/v1/misc/generate-token", { body: { apiKey } });
    await call("POST", "/api/v1/misc/generate-token", { body: { apiKey: "prl_unknown" } });
    // The response hook runs after the answer is sent; give it a moment.
    await Bun.sleep(20);
    const text = await renderMetrics();
    expect(text).toMatch(/parley_http_requests_total\{method="POST",route="\/api\/v1\/misc\/generate-token",status="200"\} [1-9]/);
    expect(text).toMatch(/parley_http_requests_total\{method="POST",route="\/api\/v1\/misc\/generate-token",status="401"\} [1-9]/);
    expect(text).toContain('parley_http_request_duration_seconds_bucket{method="POST",route="/api/v1/misc/generate-token",le="+Inf"}');
    expect(text).toMatch(/parley_queue_jobs\{queue="recorder",state="waiting"\} \d+/);
    const served = await call("GET", "/metrics");
    expect(served.status).toBe(200);
    expect(served.headers.get("content-type")).toContain("text/plain");
  });

  test("the OpenAPI document describes the token route with its schemas and errors", async () => {
    const doc = (await call("GET", "/swagger/json")).body;
    const route = doc.paths["/api/v1/misc/generate-token"].post;
    expect(Object.keys(route.responses)).toEqual(expect.arrayContaining(["200", "400", "401", "422"]));
    expect(route.requestBody).toBeDefined();
    expect(doc.components.securitySchemes.apiKey).toBeDefined();
  });
});
