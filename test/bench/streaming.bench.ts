/**
 * Streaming benchmark, run by hand: `TEST_DATABASE_URL=... bun test/bench/streaming.bench.ts [runs]`.
 * On real parts (PostgreSQL, Redis, a private nginx-rtmp, ffmpeg) it measures, per run:
 * - start request → 200 through the API, the BullMQ queue and the recorder worker;
 * - the same recorder started by a direct driver call (spawn → publishing), the reference;
 * - start request → first playable HLS segment (playlist lists it and it downloads).
 * It prints medians and the queue/direct ratio.
 */
import { tmpdir } from "node:os";
import { join } from "node:path";

process.env.DATABASE_URL = process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
process.env.REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";
process.env.REDIS_PREFIX = `parley-bench-${process.pid}`;
process.env.LOG_LEVEL = "silent";
process.env.STREAMING_X264_PRESET = "ultrafast";
process.env.STREAMING_RECORDING_DIR = join(tmpdir(), `parley-bench-${process.pid}`);

const runs = Number(process.argv[2] ?? 5);
const { closeBench, median, startBench } = await import("../support/bench");
const services = await startBench();
const { createApp } = await import("../../src/process/app");
const { overrideConfig } = await import("../../src/core/config");
const { stopStateSubscriber } = await import("../../src/modules/streaming/state");
const { createAccount } = await import("../../src/modules/accounts/service");
const { startRecorderWorker } = await import("../../workers/recorder");
const { ffmpegDriver } = await import("../../workers/recorder/ffmpeg");
const { optionsOf } = await import("../../src/modules/streaming/request");
const { startNginxRtmp } = await import("../support/nginx-rtmp");

const SECRET = "bench-secret";
const app = createApp();
const api = app.listen({ hostname: "127.0.0.1", port: 0 });
const nginx = await startNginxRtmp(`http://127.0.0.1:${api.server!.port}`, SECRET);
overrideConfig({
  streaming: { ...nginx.settings, callbackSecret: SECRET, callbackAddresses: ["127.0.0.1", "::ffff:127.0.0.1", "::1"] },
});
const worker = await startRecorderWorker(ffmpegDriver);
const { apiKey } = (await createAccount(`bench-${process.pid}`, "EdDSA")).apiKey;

const post = (path: string, body: unknown) =>
  app.handle(
    new Request(`http://parley.bench${path}`, {
      method: "POST",
      headers: { authorization: apiKey, "content-type": "application/json" },
      body: JSON.stringify(body),
    }),
  );

async function firstSegment(playlistUrl: string): Promise<void> {
  for (let i = 0; i < 400; i++) {
    const playlist = await fetch(playlistUrl).then((r) => (r.ok ? r.text() : ""));
    const segment = playlist.split("\n").find((line) => line.endsWith(".ts"));
    if (segment) {
      const response = await fetch(new URL(segment, playlistUrl));
      if (response.ok && (await response.arrayBuffer()).byteLength > 0) return;
    }
    await Bun.sleep(50);
  }
  throw new Error("no segment within 20 s");
}

const queued: number[] = [];
const direct: number[] = [];
const playable: number[] = [];

for (let run = 0; run < runs; run++) {
  const room = `bench-${run}`;
  const begin = performance.now();
  const response = await post("/terraform/v1/hooks/srs/startRecording", { room_name: room });
  const started = (await response.json()) as { hls_url: string };
  if (response.status !== 200) throw new Error(`start failed: ${JSON.stringify(started)}`);
  queued.push(performance.now() - begin);
  await firstSegment(started.hls_url);
  playable.push(performance.now() - begin);
  await post("/terraform/v1/hooks/srs/stopRecording", { room_name: room });

  const name = `bench-direct-${process.pid}-${run}`;
  const directBegin = performance.now();
  const recorder = ffmpegDriver.start({
    streamId: name,
    streamName: name,
    room,
    accountId: "bench",
    options: optionsOf({ room_name: room, is_recording: false }),
    ingestUrl: `${nginx.directUrl}/${name}`,
    destinations: [],
  });
  await recorder.ready;
  direct.push(performance.now() - directBegin);
  await recorder.stop(5_000);
}

const ms = (value: number) => `${value.toFixed(0)} ms`;
console.log(`streaming benchmark, ${runs} runs (medians)`);
console.log(`  start through API + queue + worker : ${ms(median(queued))}`);
console.log(`  start by direct driver call       : ${ms(median(direct))}`);
console.log(`  ratio queue / direct              : ${(median(queued) / median(direct)).toFixed(2)}`);
console.log(`  start request → first playable HLS segment: ${ms(median(playable))}`);

await worker.stop();
await nginx.stop();
await api.stop(true);
await stopStateSubscriber();
await closeBench(services);
process.exit(0);
