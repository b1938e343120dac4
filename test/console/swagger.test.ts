/**
 * The API reference at /swagger renders its route list in a browser that cannot reach the
 * internet; and the console's own script stays within its size budget.
 */
import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { consoleAssets } from "../../src/modules/console/bundle";
import { app, newAccount } from "../helpers";
import { type Chromium, startChromium } from "../support/browser";

// A browser test waits on pages, workers and Chromium; each test still bounds its own waits.
setDefaultTimeout(30_000);

let chromium: Chromium;
let base: string;

beforeAll(async () => {
  app.listen({ port: 0, hostname: "127.0.0.1" });
  base = `http://127.0.0.1:${app.server!.port}`;
  chromium = await startChromium();
});

afterAll(async () => {
  await chromium?.close();
  await app.stop(true);
});

test("/swagger lists the routes with every outside address blocked", async () => {
  const context = await chromium.context();
  const page = await context.newPage();
  const failed: string[] = [];
  page.on("requestfailed", (request) => failed.push(request.url()));
  const refused: string[] = [];
  page.on("response", (response) => {
    if (response.status() >= 400) refused.push(`${response.status()} ${response.url()}`);
  });
  await page.goto(`${base}/swagger`);
  const route = page.locator(".opblock-summary-path", { hasText: "/api/v1/misc/generate-token" });
  // As long as the next test waits for its operation: under the whole suite's load the page once took over 15 s.
  await route.first().waitFor({ timeout: 30_000 });
  const paths = await page.locator(".opblock-summary-path").allTextContents();
  expect(paths.length).toBeGreaterThan(20);
  expect(paths).toEqual(expect.arrayContaining(["/api/v1/pricing/cdr", "/terraform/v1/hooks/srs/startRecording"]));
  // The viewer came from Parley itself: nothing was even asked of another address.
  expect(context.blocked).toEqual([]);
  expect(failed).toEqual([]);
  expect(refused).toEqual([]);
  await context.close();
  // What a browser asks for beside the page (headless Chromium may not): an icon, not a 404.
  const icon = await fetch(`${base}/favicon.ico`);
  expect(icon.status).toBe(200);
  expect(icon.headers.get("content-type")).toBe("image/png");
}, 45_000);

test("the body /swagger offers for generate-token, with a real API key in it, is taken", async () => {
  const { apiKey } = await newAccount("RS256");
  const context = await chromium.context();
  const page = await context.newPage();
  await page.goto(`${base}/swagger`);
  const operation = page.locator(".opblock-post", { hasText: "/api/v1/misc/generate-token" }).first();
  // swagger-ui lays out every route before the first shows: on a busy machine that takes seconds.
  await operation.waitFor({ timeout: 20_000 });
  await operation.locator(".opblock-summary").click();
  await operation.getByRole("button", { name: "Try it out" }).click();
  const offered = JSON.parse(await operation.locator("textarea.body-param__text").inputValue());
  await context.close();
  const answer = await fetch(`${base}/api/v1/misc/generate-token`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ ...offered, apiKey }),
  });
  expect({ status: answer.status, offered, body: await answer.json() }).toMatchObject({
    status: 200,
    body: { token: expect.any(String) },
  });
}, 45_000);

test("the reference page names no outside address for its viewer", async () => {
  const html = await (await fetch(`${base}/swagger`)).text();
  expect(html).toContain('src="/swagger/assets/viewer.js"');
  expect(html).not.toMatch(/jsdelivr|unpkg/);
  const viewer = await fetch(`${base}/swagger/assets/swagger-ui-bundle.js`);
  expect(viewer.status).toBe(200);
  expect(viewer.headers.get("content-type")).toContain("javascript");
  expect((await fetch(`${base}/swagger/assets/..%2Fpackage.json`)).status).toBe(404);
});

test("the console's script is built by Bun, served from memory, and small", async () => {
  const page = await fetch(`${base}/console`);
  expect(page.headers.get("content-security-policy")).toContain("script-src 'self'");
  expect(page.headers.get("content-security-policy")).toContain("frame-ancestors 'none'");
  const served = await fetch(`${base}/console/app.js`);
  expect(served.headers.get("content-type")).toContain("javascript");
  const script = await served.text();
  const assets = await consoleAssets();
  expect(script).toBe(assets.files.get("app.js")!.body);
  // What every page loads, uPlot included; hls.js is a file of its own, loaded only to play a stream.
  expect(assets.scriptGzipBytes).toBeLessThan(50_000);
  expect(script).not.toContain("hls.js");
  expect([...assets.files.keys()].sort()).toEqual(["app.css", "app.js", "hls-light.js"]);
  // hls.js alone is about 117 KB of it; the rest is app.js, whose own budget is the 50 KB above.
  expect(assets.allScriptsGzipBytes).toBeLessThan(155_000);
  // Those are the bytes sent: a browser that takes gzip gets the files compressed.
  const compressed = await fetch(`${base}/console/app.js`, {
    headers: { "accept-encoding": "gzip" },
    decompress: false,
  });
  expect(compressed.headers.get("content-encoding")).toBe("gzip");
  expect((await compressed.arrayBuffer()).byteLength).toBe(assets.scriptGzipBytes);
  expect(Bun.gunzipSync(assets.files.get("hls-light.js")!.gzip)).toEqual(
    new TextEncoder().encode(assets.files.get("hls-light.js")!.body),
  );
  expect(script).toContain("/console/hls-light.js");
  const player = await fetch(`${base}/console/hls-light.js`);
  expect(player.headers.get("content-type")).toContain("javascript");
  expect(await player.text()).toBe(assets.files.get("hls-light.js")!.body);
  expect((await fetch(`${base}/console/nothing.js`)).status).toBe(404);
});
