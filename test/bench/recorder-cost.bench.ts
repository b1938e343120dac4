/**
 * Recorder cost benchmark, run by hand: `npx bun test/bench/recorder-cost.bench.ts [seconds]`.
 * Runs the real ffmpeg recorder (the default driver, on its test pattern) alone for each variant
 * a start can ask for, publishing to a private nginx-rtmp, and reads the CPU its process group
 * spent (utime + stime of /proc/<pid>/stat) over `seconds` once it publishes. Prints each
 * variant's cores used (×100 = cost units, docs/streaming.md) and the units cost.ts gives it.
 */
import { mkdirSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

process.env.LOG_LEVEL = "silent";
process.env.STREAMING_RECORDING_DIR = join(tmpdir(), `parley-cost-${process.pid}`);
const seconds = Number(process.argv[2] ?? 10);
const { config } = await import("../../src/core/config");
const { streamCost } = await import("../../src/modules/streaming/cost");
const { optionsOf } = await import("../../src/modules/streaming/request");
const { ffmpegDriver } = await import("../../workers/recorder/ffmpeg");
const { startNginxRtmp } = await import("../support/nginx-rtmp");

mkdirSync(config.streaming.recordingDir, { recursive: true });
const nginx = await startNginxRtmp("http://127.0.0.1:9", "unused");
const TICKS_PER_S = 100;

/** CPU seconds spent so far by every live process of the group. */
function groupCpu(pgid: number): number {
  let ticks = 0;
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      // After the name: state(0) ppid(1) pgrp(2) ... utime(11) stime(12).
      if (Number(fields[2]) === pgid) ticks += Number(fields[11]) + Number(fields[12]);
    } catch {}
  }
  return ticks / TICKS_PER_S;
}

const variants: Record<string, Record<string, unknown>> = {
  audio_only: { audio_only: true },
  h264: {},
  h264_recording: { is_recording: true },
  h264_llhls: { is_low_latency: true },
  h264_ladder: { multi_bitrate: true },
  h265: { codec: "H265" },
  h265_recording: { codec: "H265", is_recording: true },
  ladder_llhls_recording: { multi_bitrate: true, is_low_latency: true, is_recording: true },
};

console.log(
  `x264 preset ${config.streaming.x264Preset}, ${seconds} s each, load ${readFileSync("/proc/loadavg", "utf8").trim()}`,
);
for (const [name, request] of Object.entries(variants)) {
  const options = optionsOf({ room_name: name, ...request });
  const streamName = `cost-${name}-${process.pid}`;
  const recorder = ffmpegDriver.start({
    streamId: streamName,
    streamName,
    room: name,
    accountId: "bench",
    options,
    ingestUrl: `${nginx.directUrl}/${streamName}`,
    destinations: [],
    recordingPath: options.isRecording ? join(config.streaming.recordingDir, `${streamName}.mp4`) : undefined,
  });
  // LL-HLS media nobody packages here: read and dropped, so ffmpeg never blocks on its pipes.
  for (const media of recorder.media ?? []) media.resume();
  await recorder.ready;
  const before = groupCpu(recorder.pid);
  const from = performance.now();
  await Bun.sleep(seconds * 1000);
  const cores = (groupCpu(recorder.pid) - before) / ((performance.now() - from) / 1000);
  await recorder.stop(2_000);
  console.log(
    `${name.padEnd(16)} ${cores.toFixed(2)} cores = ${Math.round(cores * 100)} units (cost.ts: ${streamCost(options)})`,
  );
}
await nginx.stop();
