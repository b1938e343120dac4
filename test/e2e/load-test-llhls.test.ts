/**
 * `parley load-test --stream`: its LL-HLS viewers on a live low-latency stream (a recorder
 * worker running ffmpeg's test pattern into a private nginx-rtmp), each blocking on the hinted
 * part and fetching it, with the other parts off.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { join, resolve } from "node:path";
import { type LlhlsStack, startLlhlsStack } from "../support/llhls-stack";
import { until } from "../support/wait";

const ROOT = resolve(import.meta.dir, "../..");
let stack: LlhlsStack;
beforeAll(async () => {
  stack = await startLlhlsStack();
});
afterAll(async () => {
  await stack?.close();
});

test("load-test's viewers fetch the parts of a named live stream", async () => {
  const started = await stack.start({ room_name: "loadtest-llhls", is_low_latency: true });
  expect(started.status).toBe(200);
  const url: string = started.body.low_latency_hls_url;
  const stream = url.slice(url.lastIndexOf("/") + 1, -".m3u8".length);
  // Live once its media playlist hints a part.
  await until(
    async () => {
      const master = await fetch(url).then((r) => (r.ok ? r.text() : ""));
      const variant = master.split("\n").find((line) => line.includes("index.m3u8"));
      return variant ? fetch(new URL(variant, url)).then((r) => r.text()) : "";
    },
    (text) => text.includes("#EXT-X-PRELOAD-HINT"),
    30_000,
  );
  const extra = ["--stream", stream, "--viewers", "2", "--rate", "token=0,chat=0,events=0", "--duration", "3s"];
  const run = Bun.spawn(
    [
      process.execPath,
      join(ROOT, "src/parley.ts"),
      "load-test",
      "--url",
      stack.base,
      "--key",
      stack.apiKey,
      "--json",
      ...extra,
    ],
    { cwd: ROOT, stdout: "pipe", stderr: "pipe", stdin: "ignore" },
  );
  const [stdout, stderr, code] = await Promise.all([
    new Response(run.stdout).text(),
    new Response(run.stderr).text(),
    run.exited,
  ]);
  if (code !== 0) throw new Error(`exit ${code}\n${stdout}\n${stderr}`);
  const result = JSON.parse(stdout);
  expect(result.parts.llhls.status).toBe("ran");
  // Two viewers over three seconds of 0.333 s parts.
  expect(result.parts.llhls.operations).toBeGreaterThan(4);
  expect(result.parts.llhls.errors).toBe(0);
  expect(result.parts.token.status).toBe("skipped");
  await stack.stop("loadtest-llhls");
}, 60_000);
