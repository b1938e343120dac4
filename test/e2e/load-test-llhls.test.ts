/**
 * `parley load-test --start-stream`: it starts a low-latency stream (a recorder worker running
 * ffmpeg's test pattern into a private nginx-rtmp), its LL-HLS viewers each block on the hinted
 * part and fetch it, with the other parts off, and the stream is stopped at the end.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { join, resolve } from "node:path";
import { type LlhlsStack, startLlhlsStack } from "../support/llhls-stack";

const ROOT = resolve(import.meta.dir, "../..");
let stack: LlhlsStack;
beforeAll(async () => {
  stack = await startLlhlsStack();
});
afterAll(async () => {
  await stack?.close();
});

test("load-test --start-stream starts a stream, its viewers fetch its parts, and it is stopped after", async () => {
  const run = Bun.spawn(
    [
      process.execPath,
      join(ROOT, "src/parley.ts"),
      "load-test",
      ...["--url", stack.base, "--key", stack.apiKey, "--json", "--start-stream", "--viewers", "2"],
      ...["--rate", "token=0,chat=0,events=0", "--duration", "3s"],
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
  // Stopped by the load test: stopping it again finds no stream.
  const again = await stack.stop(result.id);
  expect(again.status).toBe(404);
}, 60_000);
