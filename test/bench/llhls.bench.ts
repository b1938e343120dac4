/**
 * LL-HLS benchmark, run by hand:
 *
 *   TEST_DATABASE_URL=postgres://... npx bun test/bench/llhls.bench.ts [viewers=500] [seconds=30]
 *
 * On real parts (PostgreSQL, Redis, a private nginx-rtmp for the RTMP outputs, ffmpeg's test
 * pattern through the recorder worker), with 0.333 s parts and 2 s segments:
 *
 * 1. Glass to player: hls.js (lowLatencyMode, catch-up up to 1.5x) in Chromium plays the
 *    stream; every 250 ms, wall clock minus the program date time of the frame it shows
 *    (hls.playingDate). Beside it, the edge: wall clock minus the end of the newest part in
 *    the playlist, which is what the recorder and origin add before any player.
 * 2. Viewers on one API process (`--role=api`, a child process) of a multi_bitrate stream's
 *    lowest quality (264 kbps; the top one would be 1.3 Gbit/s for 500): `viewers` players each
 *    making a blocking reload on the preload hint and then fetching that part, as LL-HLS
 *    players do, spread over client processes (test/bench/llhls/viewers.ts). A part's
 *    delivery is the moment its bytes have reached the player, less the moment the part came
 *    to exist (the origin's doorbell, heard by each client process too). The
 *    reference is one viewer, measured the same way in the same run. The API process's CPU
 *    time over the run gives the CPU per viewer.
 *
 * The machine's load average is printed with the figures: they are only as good as the
 * machine was idle.
 */
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { benchDatabase, closeBench } from "../support/bench";

const VIEWERS = Number(process.argv[2] ?? 500);
const SECONDS = Number(process.argv[3] ?? 30);
const LATENCY_WARMUP_MS = 15_000;
/** Viewer client processes (BENCH_CLIENT_PROCESSES), so the players' own work is not the origin's or the recorder's. */
const CLIENT_PROCESSES = Number(process.env.BENCH_CLIENT_PROCESSES ?? 2);

benchDatabase("TEST_DATABASE_URL (a database the benchmark may write to)");
process.env.BOOTSTRAP_ACCOUNT = "false";
process.env.STREAMING_X264_PRESET = "ultrafast";
process.env.STREAMING_RECORDING_DIR = join(tmpdir(), `parley-bench-${process.pid}`);

const { migrate } = await import("../../src/db/migrate");
await migrate();
const { createApp } = await import("../../src/app");
const { overrideConfig } = await import("../../src/config");
const { createAccount } = await import("../../src/modules/accounts/service");
const { stopStateSubscriber } = await import("../../src/modules/streaming/state");
const { stopLlhlsOrigin } = await import("../../src/modules/streaming/llhls/origin");
const { stopViewerSweeps } = await import("../../src/modules/streaming/llhls/viewers");
const { redisKey } = await import("../../src/queue/connection");
const { startRecorderWorker } = await import("../../workers/recorder");
const { ffmpegDriver } = await import("../../workers/recorder/ffmpeg");
const { startNginxRtmp } = await import("../support/nginx-rtmp");
const { startChromium } = await import("../support/browser");
const { openPlayer } = await import("../support/llhls-player");
const { parsePlaylist } = await import("../support/llhls-validator");
const { startApiProcess } = await import("../support/api-process");

const quantile = (values: number[], q: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))] ?? Number.NaN;
};
const ms = (value: number) => `${value.toFixed(0)} ms`;
const load = () => loadavg().map((l) => l.toFixed(2)).join(" ");

const SECRET = "bench-secret";
const app = createApp();
const api = app.listen({ hostname: "127.0.0.1", port: 0 });
const base = `http://127.0.0.1:${api.server!.port}`;
const nginx = await startNginxRtmp(base, SECRET);
overrideConfig({
  streaming: { ...nginx.settings, llhlsBaseUrl: `${base}/llhls/v1/live`, callbackSecret: SECRET, callbackAddresses: ["127.0.0.1", "::ffff:127.0.0.1", "::1"] },
});
const worker = await startRecorderWorker(ffmpegDriver);
const { apiKey } = (await createAccount(`bench-${process.pid}`, "EdDSA")).apiKey;
const post = (path: string, body: unknown) =>
  app.handle(new Request(`${base}${path}`, { method: "POST", headers: { authorization: apiKey, "content-type": "application/json" }, body: JSON.stringify(body) }));

console.log(`load average at start: ${load()} (${navigator.hardwareConcurrency} cores)`);
const response = await post("/terraform/v1/hooks/srs/startRecording", { room_name: "bench-llhls", is_low_latency: true });
const started = (await response.json()) as { low_latency_hls_url: string; stream_name: string };
if (response.status !== 200) throw new Error(`start failed: ${JSON.stringify(started)}`);

// 1. Glass to player.
const chromium = await startChromium();
const player = await openPlayer(chromium, started.low_latency_hls_url);
const masterUrl = started.low_latency_hls_url;
const firstVariant = async (url: string) => {
  for (;;) {
    const text = await fetch(url).then((r) => (r.ok ? r.text() : ""));
    const line = text.split("\n").find((l) => l.includes("index.m3u8"));
    if (line) return new URL(line, url);
    await Bun.sleep(100);
  }
};
const plain = await firstVariant(masterUrl);
plain.search = "";
await Bun.sleep(LATENCY_WARMUP_MS);
const latencies: number[] = [];
const edges: number[] = [];
const latencyEnd = Date.now() + SECONDS * 1000;
let stalls = 0;
const targets: number[] = [];
while (Date.now() < latencyEnd) {
  const [state, playlist] = await Promise.all([player.state(), fetch(plain).then((r) => r.text())]);
  if (state.latencyMs !== null) latencies.push(state.latencyMs);
  const last = parsePlaylist(playlist).segments.at(-1)!;
  edges.push(Date.now() - (last.programDateTime! + last.parts.reduce((sum, p) => sum + p.duration, 0) * 1000));
  stalls = state.errors.filter((e) => e.startsWith("bufferStalled")).length;
  targets.push(state.targetLatency ?? Number.NaN);
  await Bun.sleep(250);
}
const finalState = await player.state();
await player.close();
await chromium.close();
console.log(`\nglass to player (hls.js lowLatencyMode in Chromium, ${latencies.length} ` + `samples over ${SECONDS} s after ${LATENCY_WARMUP_MS / 1000} s):`);
console.log(`  p50 ${ms(quantile(latencies, 0.5))}, p95 ${ms(quantile(latencies, 0.95))}, max ${ms(quantile(latencies, 1))}`);
console.log(`  of which the edge (recorder + origin): p50 ${ms(quantile(edges, 0.5))}, p95 ${ms(quantile(edges, 0.95))}`);
console.log(`  hls.js: lowLatencyMode ${finalState.lowLatencyMode}, ${finalState.parts} parts loaded, ` + `${stalls} stalls, target latency ${targets[0]} → ${targets.at(-1)} s; load average ${load()}`);

// 2. Blocking viewers on one API process, on the ladder's lowest quality (264 kbps): 500 viewers
// of the top one would be 1.3 Gbit/s, more than client processes on this machine can take in.
await post("/terraform/v1/hooks/srs/stopRecording", { room_name: "bench-llhls" });
const ladder = await post("/terraform/v1/hooks/srs/startRecording", { room_name: "bench-llhls-ladder", is_low_latency: true, multi_bitrate: true });
const ladderStarted = (await ladder.json()) as { low_latency_hls_url: string; stream_name: string };
if (ladder.status !== 200) throw new Error(`start failed: ${JSON.stringify(ladderStarted)}`);
const VIEWED = "v4";
await firstVariant(ladderStarted.low_latency_hls_url);
const origin = await startApiProcess({ DATA_DIR: join(tmpdir(), `parley-bench-data-${process.pid}`), API_PROCESSES: "1" });
const originMaster = ladderStarted.low_latency_hls_url.replace(base, origin.http);
const cpuSeconds = async () => {
  const stat = (await Bun.file(`/proc/${origin.child.pid}/stat`).text()).split(") ")[1]!.split(" ");
  return (Number(stat[11]) + Number(stat[12])) / 100;
};

/** `count` players for `seconds`, spread over client processes of their own; answers each delivered part's delay after it came to exist. */
async function viewers(count: number, seconds: number): Promise<{ delays: number[]; answered: number[]; reloads: number; errors: number }> {
  const processes = Math.min(CLIENT_PROCESSES, count);
  const clients = Array.from({ length: processes }, (_, index) => {
    const share = Math.floor(count / processes) + (index < count % processes ? 1 : 0);
    return Bun.spawn(
      [process.execPath, join(import.meta.dir, "llhls/viewers.ts"), originMaster, String(share), String(seconds), process.env.REDIS_URL ?? "redis://127.0.0.1:6379", redisKey("llhls", ladderStarted.stream_name), VIEWED],
      { stdout: "pipe", stderr: "inherit" },
    );
  });
  const results = await Promise.all(
    clients.map(async (client) => JSON.parse(await new Response(client.stdout).text()) as { delays: number[]; answered: number[]; reloads: number; errors: number }),
  );
  return {
    delays: results.flatMap((r) => r.delays),
    answered: results.flatMap((r) => r.answered),
    reloads: results.reduce((sum, r) => sum + r.reloads, 0),
    errors: results.reduce((sum, r) => sum + r.errors, 0),
  };
}

const one = await viewers(1, 10);
const cpuBefore = await cpuSeconds();
const wallBefore = performance.now();
const many = await viewers(VIEWERS, SECONDS);
const cpu = (await cpuSeconds()) - cpuBefore;
const wall = (performance.now() - wallBefore) / 1000;
console.log(`\n${VIEWERS} blocking viewers on one API process (${SECONDS} s, the 264 kbps ` + "quality of the ladder; reload on each hint, then fetch the part):");
console.log(`  part delivered after it exists: p50 ${ms(quantile(many.delays, 0.5))}, p99 ` + `${ms(quantile(many.delays, 0.99))}, max ${ms(quantile(many.delays, 1))} ` + `(${many.delays.length} parts, ${many.reloads} reloads, ${many.errors} errors)`);
console.log(
  "  the origin's own answer to reloads that waited (Server-Timing, part there → answer written): p50 " + `${quantile(many.answered, 0.5).toFixed(1)} ms, p99 ${quantile(many.answered, 0.99).toFixed(1)} ms ` + `(${many.answered.length} reloads); one viewer: p99 ${quantile(one.answered, 0.99).toFixed(1)} ms`,
);
console.log(`  reference, one viewer: p50 ${ms(quantile(one.delays, 0.5))}, p99 ${ms(quantile(one.delays, 0.99))}; ` + `p99 ratio ${(quantile(many.delays, 0.99) / quantile(one.delays, 0.99)).toFixed(1)}`);
console.log(`  API process CPU: ${((cpu / wall) * 100).toFixed(1)}% of a core, ` + `${((cpu / wall / VIEWERS) * 100).toFixed(3)}% per viewer ` + `(${((cpu / many.reloads) * 1e6).toFixed(0)} µs per reload + part); load average ${load()}`);

origin.child.kill("SIGTERM");
await origin.child.exited;
await post("/terraform/v1/hooks/srs/stopRecording", { room_name: "bench-llhls-ladder" });
await worker.stop();
await nginx.stop();
await api.stop(true);
stopViewerSweeps();
await Promise.all([stopStateSubscriber(), stopLlhlsOrigin()]);
await closeBench();
process.exit(0);
