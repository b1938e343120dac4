/**
 * LL-HLS benchmark, run by hand:
 *
 *   TEST_DATABASE_URL=postgres://... npx bun test/bench/llhls.bench.ts [viewers=500] [seconds=20]
 *
 * It takes about a minute and a half (viewers=0: glass to player alone, forty seconds), and
 * prints table rows for docs/streaming.md.
 *
 * On real parts (PostgreSQL, Redis, a private nginx-rtmp for the RTMP outputs, ffmpeg's test
 * pattern through the recorder worker), with 0.333 s parts and 2 s segments:
 *
 * 1. Glass to player: hls.js (lowLatencyMode, catch-up up to 1.5x) in Chromium plays the
 *    stream, opened once the stream answers; every 250 ms, wall clock minus the program date time of the frame it shows
 *    (hls.playingDate). Beside it, the edge: wall clock minus the end of the newest part in
 *    the playlist, which is what the recorder and origin add before any player.
 * 2. Viewers on one API process (`--role=api`, a child process) of a multi_bitrate stream's
 *    lowest quality (264 kbps; the top one would be 1.3 Gbit/s for 500), or with
 *    BENCH_VIEWED=audio of an audio-only stream (no video encoding beside the origin): `viewers` players each
 *    making a blocking reload on the preload hint and then fetching that part, as LL-HLS
 *    players do, each on a keep-alive connection of its own, spread over client processes
 *    (BENCH_CLIENT_PROCESSES, 2) of a deliberately cheap raw-HTTP client
 *    (test/bench/llhls/viewers.ts). A part's delivery is the moment its bytes have reached
 *    the player, less the moment the part came to exist (the origin's doorbell, heard by each
 *    client process too), counted once every player has joined; the players all join at
 *    once, and the parts that came to exist meanwhile are printed apart (the join). The
 *    reference is one viewer, measured the same way in the same run.
 *    What the origin costs and what the players cost are told apart: the origin's own time
 *    from a part to the reload's answer (its Server-Timing) and the API process's CPU time,
 *    beside the players' CPU time and what they saw.
 * 3. The API process's CPU time per answer apart from any waiting, as fast as 20 connections
 *    ask: a part, a blocking reload whose part is there, and /healthz, which is what the HTTP
 *    pipeline every route goes through costs by itself.
 *
 * The machine's load average is printed with the figures: they are only as good as the
 * machine was idle.
 */
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { benchDatabase, closeBench, startBench } from "../support/bench";

const VIEWERS = Number(process.argv[2] ?? 500);
const SECONDS = Number(process.argv[3] ?? 20);
const LATENCY_WARMUP_MS = 10_000;
/**
 * What the viewers watch (BENCH_VIEWED): by default the ladder's 264 kbps quality, its five
 * encodes on this machine too; `audio`, an audio-only stream (128 kbps), leaves the cores to
 * the origin and the players, as a recorder on a machine of its own would.
 */
const VIEWED_STREAM =
  process.env.BENCH_VIEWED === "audio"
    ? { options: { audio_only: true }, rendition: "v0", what: "an audio-only stream, 128 kbps" }
    : { options: { multi_bitrate: true }, rendition: "v4", what: "the 264 kbps quality of the five-quality ladder" };
/** Viewer client processes (BENCH_CLIENT_PROCESSES), so the players' own work is not the origin's or the recorder's. */
const CLIENT_PROCESSES = Number(process.env.BENCH_CLIENT_PROCESSES ?? 2);

benchDatabase("TEST_DATABASE_URL (a database the benchmark may write to)");
process.env.BOOTSTRAP_ACCOUNT = "false";
process.env.STREAMING_X264_PRESET = "ultrafast";
process.env.STREAMING_RECORDING_DIR = join(tmpdir(), `parley-bench-${process.pid}`);

const services = await startBench();
const { createApp } = await import("../../src/process/app");
const { config, overrideConfig } = await import("../../src/core/config");
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
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");

const SECRET = "bench-secret";
const app = createApp();
const api = app.listen({ hostname: "127.0.0.1", port: 0 });
const base = `http://127.0.0.1:${api.server!.port}`;
const nginx = await startNginxRtmp(base, SECRET);
overrideConfig({
  streaming: {
    ...nginx.settings,
    llhlsBaseUrl: `${base}/llhls/v1/live`,
    callbackSecret: SECRET,
    callbackAddresses: ["127.0.0.1", "::ffff:127.0.0.1", "::1"],
  },
});
const worker = await startRecorderWorker(ffmpegDriver);
const { apiKey } = (await createAccount(`bench-${process.pid}`, "EdDSA")).apiKey;
const post = (path: string, body: unknown) =>
  app.handle(
    new Request(`${base}${path}`, {
      method: "POST",
      headers: { authorization: apiKey, "content-type": "application/json" },
      body: JSON.stringify(body),
    }),
  );

console.log(`load average at start: ${load()} (${navigator.hardwareConcurrency} cores)`);
const response = await post("/terraform/v1/hooks/srs/startRecording", {
  room_name: "bench-llhls",
  is_low_latency: true,
});
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
const latencyLoad = load();
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
console.log(
  `\nglass to player (hls.js lowLatencyMode in Chromium, ${latencies.length} samples ` +
    `over ${SECONDS} s after ${LATENCY_WARMUP_MS / 1000} s):`,
);
console.log(
  `  p50 ${ms(quantile(latencies, 0.5))}, p95 ${ms(quantile(latencies, 0.95))}, max ${ms(quantile(latencies, 1))}`,
);
console.log(
  `  of which the edge (recorder + origin): p50 ${ms(quantile(edges, 0.5))}, p95 ${ms(quantile(edges, 0.95))}`,
);
// A part is listed once whole, so the newest one ended at least half a part before the median sample, with
// nothing else in the way; a median edge below that shows program date times dated late by at least the
// difference (the recorder's first frames all came late), and glass to player reads low by as much.
const datedLate = Math.max(0, config.streaming.llhlsPartMs / 2 - quantile(edges, 0.5));
const atLeast = (q: number) => quantile(latencies, q) + datedLate;
if (datedLate > 0) {
  console.log(
    `  program date times late by at least ${ms(datedLate)}: ` +
      `glass to player at least p50 ${ms(atLeast(0.5))}, p95 ${ms(atLeast(0.95))}`,
  );
}
console.log(
  `  hls.js: lowLatencyMode ${finalState.lowLatencyMode}, ${finalState.parts} parts loaded, ${stalls} stalls, ` +
    `target latency ${targets[0]} → ${targets.at(-1)} s; load average ${load()}`,
);
for (const stall of finalState.stalls) {
  console.log(
    `  stall ${stall.after.toFixed(1)} s after the page opened, at ${stall.at.toFixed(2)} s of video, ` +
      `${stall.buffered.toFixed(2)} s buffered ahead`,
  );
}
const seconds = (value: number) => `${(value / 1000).toFixed(2)} s`;
console.log(
  "\nFor docs/streaming.md (glass to player, and corrected for late dating | edge | hls.js stalls | load average):",
);
console.log(
  `| p50 ${seconds(quantile(latencies, 0.5))}, p95 ${seconds(quantile(latencies, 0.95))}` +
    (datedLate > 0 ? ` (at least ${seconds(atLeast(0.5))}, ${seconds(atLeast(0.95))})` : "") +
    ` | p50 ${seconds(quantile(edges, 0.5))}, p95 ${seconds(quantile(edges, 0.95))} | ${stalls} | ${latencyLoad} |`,
);

await post("/terraform/v1/hooks/srs/stopRecording", { room_name: "bench-llhls" });

/** Answers counted while `connections` keep-alive connections ask `url` one request after another for `seconds`. */
async function hammer(url: URL, connections: number, seconds: number): Promise<number> {
  const request = `GET ${url.pathname}${url.search} HTTP/1.1\r\nhost: ${url.host}\r\n\r\n`;
  const end = Date.now() + seconds * 1000;
  let answers = 0;
  await Promise.all(
    Array.from({ length: connections }, async () => {
      let received = Buffer.alloc(0);
      let answered: () => void = () => {};
      const socket = await Bun.connect({
        hostname: url.hostname,
        port: Number(url.port),
        socket: {
          data(_socket, chunk) {
            received = Buffer.concat([received, chunk]);
            const head = received.indexOf("\r\n\r\n");
            const length = /content-length: *(\d+)/i.exec(received.toString("latin1", 0, Math.max(head, 0)));
            if (head >= 0 && received.length >= head + 4 + Number(length?.[1] ?? 0)) answered();
          },
        },
      });
      while (Date.now() < end) {
        received = Buffer.alloc(0);
        await new Promise<void>((resolve) => {
          answered = resolve;
          socket.write(request);
        });
        answers++;
      }
      socket.end();
    }),
  );
  return answers;
}

/** Section 2; `viewers=0` leaves it out, to measure glass to player alone. */
async function manyViewers(): Promise<void> {
  // 2. Blocking viewers on one API process, on a low bitrate: 500 viewers of a 2.6 Mbps quality would be
  // 1.3 Gbit/s, more than client processes on this machine can take in.
  const ladder = await post("/terraform/v1/hooks/srs/startRecording", {
    room_name: "bench-llhls-ladder",
    is_low_latency: true,
    ...VIEWED_STREAM.options,
  });
  const ladderStarted = (await ladder.json()) as { low_latency_hls_url: string; stream_name: string };
  if (ladder.status !== 200) throw new Error(`start failed: ${JSON.stringify(ladderStarted)}`);
  const VIEWED = VIEWED_STREAM.rendition;
  await firstVariant(ladderStarted.low_latency_hls_url);
  const origin = await startApiProcess({
    DATA_DIR: join(tmpdir(), `parley-bench-data-${process.pid}`),
    API_PROCESSES: "1",
    // Every viewer comes from 127.0.0.1, as they would through a CDN: the per-address cap is off, the rest raised.
    LIMIT_LLHLS_WAITS_PER_ADDRESS: "0",
    LIMIT_LLHLS_WAITS_PER_STREAM: String(Math.max(2_000, VIEWERS * 2)),
    LIMIT_LLHLS_WAITS_PER_PROCESS: String(Math.max(3_000, VIEWERS * 2)),
  });
  const originMaster = ladderStarted.low_latency_hls_url.replace(base, origin.http);
  const cpuSeconds = async (pid = origin.child.pid) => {
    const stat = (await Bun.file(`/proc/${pid}/stat`).text()).split(") ")[1]!.split(" ");
    return (Number(stat[11]) + Number(stat[12])) / 100;
  };

  interface Seen {
    delays: number[];
    joining: number[];
    reloaded: number[];
    answered: number[];
    reloads: number;
    errors: number;
    parts: number;
    cpuSeconds: number;
  }

  /** `count` players for `seconds`, spread over client processes of their own; what they saw, together. */
  async function viewers(
    count: number,
    seconds: number,
    master = originMaster,
    channel = redisKey("llhls", ladderStarted.stream_name),
  ): Promise<Seen> {
    const processes = Math.min(CLIENT_PROCESSES, count);
    const clients = Array.from({ length: processes }, (_, index) => {
      const share = Math.floor(count / processes) + (index < count % processes ? 1 : 0);
      return Bun.spawn(
        [
          process.execPath,
          join(import.meta.dir, "llhls/viewers.ts"),
          master,
          String(share),
          String(seconds),
          process.env.REDIS_URL ?? "redis://127.0.0.1:6379",
          channel,
          VIEWED,
        ],
        { stdout: "pipe", stderr: "inherit" },
      );
    });
    const results = await Promise.all(
      clients.map(async (client) => JSON.parse(await new Response(client.stdout).text()) as Seen),
    );
    return {
      delays: results.flatMap((r) => r.delays),
      joining: results.flatMap((r) => r.joining),
      reloaded: results.flatMap((r) => r.reloaded),
      answered: results.flatMap((r) => r.answered),
      reloads: results.reduce((sum, r) => sum + r.reloads, 0),
      errors: results.reduce((sum, r) => sum + r.errors, 0),
      parts: Math.max(...results.map((r) => r.parts)),
      cpuSeconds: results.reduce((sum, r) => sum + r.cpuSeconds, 0),
    };
  }

  const one = await viewers(1, 10);
  const cpuBefore = await cpuSeconds();
  const wallBefore = performance.now();
  const loadBefore = load();
  const many = await viewers(VIEWERS, SECONDS);
  const cpu = (await cpuSeconds()) - cpuBefore;
  const wall = (performance.now() - wallBefore) / 1000;
  const loadAfter = load();

  // The floor, right after on the same machine: the same players against a bare Bun server
  // (test/bench/llhls/floor.ts) with a playlist and parts of the watched stream's sizes.
  const watchedUrl = new URL(
    (await fetch(originMaster).then((r) => r.text())).split("\n").find((l) => l.includes(`/${VIEWED}/index.m3u8`))!,
    originMaster,
  );
  const newestPart = async () => {
    const playlist = await fetch(watchedUrl).then((r) => r.text());
    const [hintMsn, hintPart] = parsePlaylist(playlist)
      .preloadHint!.replace(/\.m4s$/, "")
      .split(".")
      .map(Number) as [number, number];
    const [msn, part] = hintPart > 0 ? [hintMsn, hintPart - 1] : [hintMsn - 1, 0];
    const bytes = await fetch(new URL(`${msn}.${part}.m4s`, watchedUrl)).then((r) => r.arrayBuffer());
    return { msn, part, partBytes: bytes.byteLength, playlistBytes: Buffer.byteLength(playlist) };
  };
  const sizes = await newestPart();
  const floorChannel = redisKey("llhls", `bench-floor-${process.pid}`);
  const floor = Bun.spawn(
    [
      process.execPath,
      join(import.meta.dir, "llhls/floor.ts"),
      process.env.REDIS_URL ?? "redis://127.0.0.1:6379",
      floorChannel,
      VIEWED,
      String(config.streaming.llhlsPartMs),
      String(sizes.partBytes),
      String(sizes.playlistBytes),
    ],
    { stdout: "pipe", stderr: "inherit" },
  );
  const floorPort = (await floor.stdout.getReader().read()).value!;
  const floorMaster = `http://127.0.0.1:${new TextDecoder().decode(floorPort).trim()}/floor.m3u8`;
  const floorCpuBefore = await cpuSeconds(floor.pid);
  const floorWallBefore = performance.now();
  const floorLoadBefore = load();
  const bare = await viewers(VIEWERS, SECONDS, floorMaster, floorChannel);
  const floorCpu = (await cpuSeconds(floor.pid)) - floorCpuBefore;
  const floorWall = (performance.now() - floorWallBefore) / 1000;
  const p = (values: number[], q: number) => quantile(values, q).toFixed(1);
  const keptUp = many.reloads / (VIEWERS * many.parts);
  console.log(
    `\n${VIEWERS} blocking viewers on one API process (${SECONDS} s, ${VIEWED_STREAM.what}; ` +
      `each reloads on the hint, then fetches the part; ${CLIENT_PROCESSES} client processes):`,
  );
  console.log(
    `  origin, part there → reload answered (Server-Timing, ${many.answered.length} reloads that waited): ` +
      `p50 ${p(many.answered, 0.5)} ms, p99 ${p(many.answered, 0.99)} ms, max ${p(many.answered, 1)} ms`,
  );
  console.log(
    `  player, part there → reload answer received: p50 ${p(many.reloaded, 0.5)} ms, p99 ${p(many.reloaded, 0.99)} ms`,
  );
  console.log(
    `  player, part there → part received: p50 ${p(many.delays, 0.5)} ms, p99 ${p(many.delays, 0.99)} ms, ` +
      `max ${p(many.delays, 1)} ms (${many.delays.length} parts, ${many.reloads} reloads, ${many.errors} errors; ` +
      `${(keptUp * 100).toFixed(0)}% of the reloads keeping up takes)`,
  );
  const joinOf = (seen: Seen) =>
    seen.joining.length === 0
      ? "no part came to exist meanwhile"
      : `p50 ${p(seen.joining, 0.5)} ms, p99 ${p(seen.joining, 0.99)} ms (${seen.joining.length} parts)`;
  console.log(`  while they joined (all at once), parts received: ${joinOf(many)}; the floor's: ${joinOf(bare)}`);
  console.log(
    `  reference, one viewer: part received p50 ${p(one.delays, 0.5)} ms, p99 ${p(one.delays, 0.99)} ms; ` +
      `p99 ratio ${(quantile(many.delays, 0.99) / quantile(one.delays, 0.99)).toFixed(1)}`,
  );
  const perViewer = (seconds: number) =>
    `${((seconds / wall) * 100).toFixed(1)}% of a core, ` +
    `${((seconds / wall / VIEWERS) * 100).toFixed(3)}% per viewer, ` +
    `${((seconds / many.reloads) * 1e6).toFixed(0)} µs per reload + part`;
  console.log(`  CPU, API process: ${perViewer(cpu)}`);
  console.log(`  CPU, viewer processes: ${perViewer(many.cpuSeconds)}`);
  console.log(`  load average ${loadBefore} → ${loadAfter}`);
  const floorPerReload = (seconds: number) =>
    `${((seconds / floorWall) * 100).toFixed(1)}% of a core, ` +
    `${((seconds / bare.reloads) * 1e6).toFixed(0)} µs per reload + part`;
  console.log(
    "  floor, the same players against a bare Bun server " +
      `(${sizes.playlistBytes} B playlist, ${sizes.partBytes} B parts): ` +
      `part received p50 ${p(bare.delays, 0.5)} ms, p99 ${p(bare.delays, 0.99)} ms, max ${p(bare.delays, 1)} ms; ` +
      `reload answer received p99 ${p(bare.reloaded, 0.99)} ms (${bare.delays.length} parts, ${bare.errors} errors, ` +
      `${((bare.reloads / (VIEWERS * bare.parts)) * 100).toFixed(0)}% of the reloads keeping up takes)`,
  );
  console.log(
    `  floor CPU, server: ${floorPerReload(floorCpu)}; viewer processes: ${floorPerReload(bare.cpuSeconds)}; ` +
      `load average ${floorLoadBefore} → ${load()}`,
  );
  console.log(
    "\nFor docs/streaming.md (viewers | origin: part there → reload answered | " +
      "player: part there → part received | API process CPU | viewers' CPU | load average):",
  );
  console.log(
    `| ${VIEWERS} | p50 ${p(many.answered, 0.5)} ms, p99 ${p(many.answered, 0.99)} ms ` +
      `| p50 ${p(many.delays, 0.5)} ms, p99 ${p(many.delays, 0.99)} ms (one viewer: p99 ${p(one.delays, 0.99)} ms) ` +
      `| ${perViewer(cpu)} | ${((many.cpuSeconds / wall) * 100).toFixed(0)}% of a core | ${loadBefore} |`,
  );
  console.log(
    `| ${VIEWERS}, bare Bun floor | | p50 ${p(bare.delays, 0.5)} ms, p99 ${p(bare.delays, 0.99)} ms ` +
      `| ${floorPerReload(floorCpu)} | ${((bare.cpuSeconds / floorWall) * 100).toFixed(0)}% of a core ` +
      `| ${floorLoadBefore} |`,
  );

  // 3. What the origin costs per answer, apart from any waiting: the newest whole part (kept in memory), a
  // blocking reload for it (already there), and /healthz (the HTTP pipeline every route goes through), each
  // asked as fast as 20 keep-alive connections can for 4 s; the API process's CPU time per answer. Beside
  // them, what the bare Bun server spends on a part and a playlist of the same sizes.
  const { msn: wholeMsn, part: wholePart } = await newestPart();
  const blockingUrl = `${watchedUrl.href}&_HLS_msn=${wholeMsn}&_HLS_part=${wholePart}`;
  // An encoded query member (`%41` is `A`) sends the same request through the app's pipeline
  // rather than the route players' requests take (src/modules/streaming/llhls/route.ts).
  const throughPipeline = (url: string) => new URL(`${url}${url.includes("?") ? "&" : "?"}viewer=%41bcdefghijk`);
  const costs = [
    ["a part", new URL(`${wholeMsn}.${wholePart}.m4s`, watchedUrl)],
    ["a blocking reload, its part there", new URL(blockingUrl)],
    ["through the pipeline: a part", throughPipeline(new URL(`${wholeMsn}.${wholePart}.m4s`, watchedUrl).href)],
    ["a blocking reload", throughPipeline(blockingUrl.replace(/viewer=[^&]*&/, ""))],
    ["/healthz", new URL("/healthz", origin.http)],
    ["from the bare Bun server: a part", new URL(`live/${VIEWED}/1.0.m4s`, floorMaster), floor.pid],
    ["a playlist", new URL(`live/${VIEWED}/index.m3u8?_HLS_msn=1&_HLS_part=0`, floorMaster), floor.pid],
  ] as const;
  const rows: string[] = [];
  for (const [what, url, pid] of costs) {
    const before = await cpuSeconds(pid);
    const answers = await hammer(url, 20, 4);
    const perAnswer = ((await cpuSeconds(pid)) - before) / answers;
    rows.push(`${what} ${(perAnswer * 1e6).toFixed(0)} µs`);
  }
  console.log(`\nCPU per answer, apart from waiting, API process: ${rows.join(", ")}; load average ${load()}`);

  floor.kill();
  origin.child.kill("SIGTERM");
  await origin.child.exited;
  await post("/terraform/v1/hooks/srs/stopRecording", { room_name: "bench-llhls-ladder" });
}
if (VIEWERS > 0) await manyViewers();
await worker.stop();
await nginx.stop();
await api.stop(true);
stopViewerSweeps();
await Promise.all([stopStateSubscriber(), stopLlhlsOrigin()]);
await closeBench(services);
process.exit(0);
