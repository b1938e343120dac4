/**
 * MAX_BODY_BYTES on a real API process (Bun's own limit answers a bare 413, so only a
 * listening server shows it): an oversized body is 413 in the error shape, whether its
 * length is declared or it comes chunked, and a chunked body under the limit still works.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { newAccount } from "../helpers";
import { startApiProcess } from "../support/api-process";

const LIMIT = 4096;

function chunked(text: string): ReadableStream<Uint8Array> {
  const bytes = new TextEncoder().encode(text);
  return new ReadableStream({
    start(controller) {
      for (let at = 0; at < bytes.length; at += 1000) controller.enqueue(bytes.slice(at, at + 1000));
      controller.close();
    },
  });
}

describe("body size limit", () => {
  let base: string;
  let api: ReturnType<typeof Bun.spawn>;
  let apiKey: string;

  beforeAll(async () => {
    apiKey = (await newAccount()).apiKey;
    const started = await startApiProcess({ MAX_BODY_BYTES: String(LIMIT) });
    api = started.child;
    base = started.http;
  });

  afterAll(async () => {
    api.kill("SIGKILL");
    await api.exited;
  });

  const post = (body: string | ReadableStream<Uint8Array>, contentType = "application/json") =>
    fetch(`${base}/api/v1/misc/generate-token`, { method: "POST", headers: { "content-type": contentType }, body });

  test("a body with a declared length over the limit is 413 in the error shape", async () => {
    const response = await post(JSON.stringify({ apiKey, user: { name: "x".repeat(LIMIT) } }));
    expect(response.status).toBe(413);
    expect(response.headers.get("content-type")).toContain("application/json");
    expect(await response.json()).toEqual({
      error: { code: "payload_too_large", message: `the body may be at most ${LIMIT} bytes` },
    });
  });

  test("a chunked body that grows past the limit is 413 in the error shape", async () => {
    const response = await post(chunked(JSON.stringify({ apiKey, user: { name: "x".repeat(LIMIT * 3) } })));
    expect(response.status).toBe(413);
    expect(await response.json()).toEqual({
      error: { code: "payload_too_large", message: `the body may be at most ${LIMIT} bytes` },
    });
  });

  test("a chunked body under the limit is read and validated as usual", async () => {
    const ok = await post(chunked(JSON.stringify({ apiKey, user: { id: "alice" } })));
    expect(ok.status).toBe(200);
    expect((await ok.json()).token).toBeString();
    const broken = await post(chunked("{not json"));
    expect(broken.status).toBe(400);
    expect((await broken.json()).error.code).toBe("invalid_json");
    const invalid = await post(chunked(JSON.stringify({ apiKey, exp: { not: "a duration" } })));
    expect(invalid.status).toBe(400);
    expect((await invalid.json()).error.message).toStartWith("exp");
  });

  test("a chunked form body under the limit is parsed too", async () => {
    const response = await fetch(`${base}/api/v1/scheduler/conference`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", authorization: apiKey },
      body: chunked(`name=chunky&start_time=2030-01-15T10:00:00.000Z&mail_owner=u@conference.meet.example.com`),
    });
    expect(response.status).toBe(200);
    expect((await response.json()).name).toBe("chunky");
  });
});
