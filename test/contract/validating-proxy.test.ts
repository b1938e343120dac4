/**
 * The validating proxy the end-to-end flows and the docs' examples go through
 * (test/support/validating-proxy.ts) fails what it should: Prism in front of the app, checking
 * against Parley's own description with one declared status and one route taken out, passes what
 * the description declares and turns the status it no longer declares, and the route it no longer
 * describes, into violations.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { app, newAccount } from "../helpers";
import { freePort } from "../support/ports";
import { startValidatingProxy, type ValidatingProxy } from "../support/validating-proxy";

const LISTED = "/api/v1/scheduler/reservation";

describe("Prism's validating proxy against a description that lacks a status and a route", () => {
  let server: ReturnType<typeof Bun.serve>;
  let proxy: ValidatingProxy;
  let folder: string;
  let apiKey: string;

  beforeAll(async () => {
    server = Bun.serve({ hostname: "127.0.0.1", port: await freePort(), fetch: (request) => app.handle(request) });
    const upstream = `http://127.0.0.1:${server.port}`;
    const document = (await (await fetch(`${upstream}/swagger/json`)).json()) as {
      paths: Record<string, Record<string, { responses: Record<string, unknown> }>>;
    };
    expect(Object.keys(document.paths[LISTED]!.get!.responses)).toContain("401");
    delete document.paths[LISTED]!.get!.responses["401"];
    expect(document.paths["/readyz"]).toBeDefined();
    delete document.paths["/readyz"];
    folder = mkdtempSync(join(tmpdir(), "parley-contract-"));
    writeFileSync(join(folder, "openapi.json"), JSON.stringify(document));
    proxy = await startValidatingProxy(upstream, { validateRequests: false, document: join(folder, "openapi.json") });
    ({ apiKey } = await newAccount());
  }, 70_000);

  afterAll(async () => {
    await proxy?.stop();
    server?.stop(true);
    if (folder) rmSync(folder, { recursive: true, force: true });
  });

  const send = async (path: string, headers: Record<string, string> = {}) => {
    const response = await fetch(`${proxy.base}${path}`, { headers, signal: AbortSignal.timeout(15_000) });
    return { status: response.status, found: proxy.violations(response.headers), body: await response.text() };
  };

  test("an answer the description declares passes through unchanged", async () => {
    const listed = await send(LISTED, { authorization: apiKey });
    expect(listed.found, proxy.tail()).toEqual([]);
    expect(listed.status).toBe(200);
    expect(JSON.parse(listed.body)).toEqual([]);
  });

  test("a status the route sends but the description does not declare is a violation", async () => {
    const refused = await send(LISTED);
    // Parley's own answer, passed on: the 401 the description no longer lists.
    expect(refused.status).toBe(401);
    expect(JSON.parse(refused.body).error.code).toBe("unauthorized");
    expect(refused.found).toHaveLength(1);
    expect(refused.found[0]).toStartWith("response: Unable to match the returned status code with those defined");
  });

  test("a route the description does not describe is a violation", async () => {
    const unknown = await send("/readyz");
    expect(unknown.status).toBe(200);
    expect(unknown.found).toEqual(["request: Selected route not found (Warning)"]);
  });
});
