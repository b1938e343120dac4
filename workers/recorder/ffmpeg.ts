/**
 * The default recorder: one ffmpeg process per stream. It reads the room's media (or a
 * test pattern with a tone when no source is configured), encodes it once per quality,
 * and fans the top quality out with the tee muxer to the media server's ingest, every
 * external destination and the MP4 recording. With is_low_latency each quality is also
 * written as fragmented MP4, a fragment per frame, to a pipe of its own (fd 3, 4, ...) that
 * the worker cuts into LL-HLS parts (workers/recorder/llhls.ts).
 */
import { config } from "../../src/core/config";
import { BITRATE_LADDER } from "../../src/modules/streaming";
import type { RecorderDriver, RecorderProcess, RecorderSpec } from "./driver";
import { spawnGroup } from "./process";

const FPS = 25;
/** Fragmented MP4 stays playable up to the last fragment even when the recorder is killed. */
export const MP4_FLAGS = "+frag_keyframe+empty_moov+default_base_moof";

/** A fragment per frame, so the LL-HLS origin can pass a part on while it is written. */
const llhlsOutput = (fd: number) =>
  `[f=mp4:movflags=${MP4_FLAGS}:frag_duration=${Math.round(1_000_000 / FPS)}]pipe:${fd}`;

/**
 * The keyframe schedule of a low-latency stream, in frames: one opens every segment, and
 * within it one every `STREAMING_LLHLS_KEYFRAME_MS` rounded to whole parts (the cutter's
 * parts are whole frames up to the part target, counted from the segment's start), so each
 * keyframe starts a part, which is then independent.
 */
export function lowLatencyKeyframes(s = config.streaming): {
  segmentFrames: number;
  partFrames: number;
  keyframeFrames: number;
} {
  const segmentFrames = Math.round((s.llhlsSegmentMs * FPS) / 1000);
  const partFrames = Math.max(1, Math.floor((s.llhlsPartMs * FPS) / 1000 + 1e-6));
  const parts = Math.max(1, Math.round(s.llhlsKeyframeMs / ((partFrames * 1000) / FPS)));
  return { segmentFrames, partFrames, keyframeFrames: Math.min(segmentFrames, parts * partFrames) };
}

/** Seconds between the keyframes within a low-latency segment (the cutter's schedule). */
export const lowLatencyKeyframeS = () => lowLatencyKeyframes().keyframeFrames / FPS;

export interface Rendition {
  label: string;
  width: number;
  height: number;
  videoKbps: number;
  audioKbps: number;
  /** Where this rendition is published; the first one also feeds the extra outputs. */
  url: string;
}

/** The qualities the recorder encodes, best first: the ladder with multi_bitrate, else one. */
export function renditions(spec: Pick<RecorderSpec, "options" | "ingestUrl">): Rendition[] {
  const portrait = spec.options.layout === "mobile";
  const size = (width: number, height: number) => (portrait ? { width: height, height: width } : { width, height });
  if (spec.options.multiBitrate) {
    return BITRATE_LADDER.map((variant, index) => ({
      label: `v${index}`,
      ...size(variant.width, variant.height),
      videoKbps: variant.totalKbps - variant.audioKbps,
      audioKbps: variant.audioKbps,
      url: `${spec.ingestUrl}${variant.suffix}`,
    }));
  }
  const hd = spec.options.profile === "HD";
  return [
    {
      label: "v0",
      ...(hd ? size(1920, 1080) : size(1280, 720)),
      videoKbps: hd ? 6000 : 2500,
      audioKbps: 128,
      url: spec.ingestUrl,
    },
  ];
}

/** The tee muxer's slave list for the top rendition: local ingest first, its failure ends the stream. */
function teeTargets(spec: RecorderSpec, top: string, withRecording: boolean): string {
  const targets = [`[f=flv:onfail=abort]${top}`];
  if (spec.options.isLowLatency) targets.push(llhlsOutput(3));
  // A destination that refuses us must not take the stream down with it.
  for (const destination of spec.destinations) targets.push(`[f=flv:onfail=ignore]${destination}`);
  if (withRecording && spec.recordingPath) targets.push(`[f=mp4:movflags=${MP4_FLAGS}]${spec.recordingPath}`);
  return targets.join("|");
}

function sourceUrl(spec: RecorderSpec, template: string): string {
  const values: Record<string, string> = {
    room: spec.room,
    layout: spec.options.layout,
    profile: spec.options.profile,
    username: String(spec.options.username),
  };
  return template.replace(/\{(room|layout|profile|username)\}/g, (_, name: string) =>
    encodeURIComponent(values[name]!),
  );
}

export function ffmpegArgs(spec: RecorderSpec, preset: string = config.streaming.x264Preset): string[] {
  const options = spec.options;
  const args = [
    "-hide_banner",
    "-nostdin",
    "-loglevel",
    "error",
    "-nostats",
    "-progress",
    "pipe:1",
    "-stats_period",
    "0.5",
  ];
  const videoIn = "0:v";
  let audioIn = "0:a?";
  if (spec.mediaSource) {
    args.push("-i", spec.mediaSource);
  } else if (options.audioOnly) {
    args.push("-re", "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000");
    audioIn = "0:a";
  } else {
    args.push("-re", "-f", "lavfi", "-i", `testsrc2=size=1280x720:rate=${FPS}`);
    args.push("-re", "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000");
    audioIn = "1:a";
  }
  const recording = spec.recordingPath !== undefined;
  const audio = (kbps: number) => ["-c:a", "aac", `-b:a`, `${kbps}k`, "-ar", "48000", "-ac", "2"];

  if (options.audioOnly) {
    args.push(
      "-map",
      audioIn,
      ...audio(128),
      "-flags:a",
      "+global_header",
      "-f",
      "tee",
      teeTargets(spec, spec.ingestUrl, recording),
    );
    return args;
  }

  const all = renditions(spec);
  const separateRecording = recording && options.codec === "H265";
  const splits = all.length + (separateRecording ? 1 : 0);
  const canvas = all[0]!;
  const graph = [
    `[${videoIn}]fps=${FPS},scale=${canvas.width}:${canvas.height}:force_original_aspect_ratio=decrease,` +
      `pad=${canvas.width}:${canvas.height}:(ow-iw)/2:(oh-ih)/2,setsar=1,format=yuv420p,split=${splits}` +
      all.map((r) => `[c${r.label}]`).join("") +
      (separateRecording ? "[rec]" : ""),
    ...all.map((r) => `[c${r.label}]scale=${r.width}:${r.height}[${r.label}]`),
  ];
  args.push("-filter_complex", graph.join(";"));
  // Keyframes on a fixed clock: the media server cuts HLS segments on them. A low-latency
  // stream counts them in frames (a segment's worth, and within it the parts' grid), since the
  // LL-HLS cutter starts a segment on the first of each segment and an independent part on each.
  const { segmentFrames, keyframeFrames } = lowLatencyKeyframes();
  const keyframes = options.isLowLatency
    ? `expr:eq(mod(mod(n,${segmentFrames}),${keyframeFrames}),0)`
    : "expr:gte(t,n_forced*2)";
  all.forEach((r, index) => {
    args.push("-map", `[${r.label}]`, "-map", audioIn);
    args.push("-c:v", "libx264", "-preset", preset, "-tune", "zerolatency", "-profile:v", "main");
    if (options.profile === "HD" && !options.multiBitrate) {
      args.push("-crf", "20", "-maxrate", `${r.videoKbps}k`, "-bufsize", `${r.videoKbps * 2}k`);
    } else {
      args.push("-b:v", `${r.videoKbps}k`, "-maxrate", `${r.videoKbps}k`, "-bufsize", `${r.videoKbps * 2}k`);
    }
    args.push("-force_key_frames", keyframes, "-sc_threshold", "0", ...audio(r.audioKbps));
    if (index === 0) {
      args.push("-flags", "+global_header", "-f", "tee", teeTargets(spec, r.url, recording && !separateRecording));
    } else if (options.isLowLatency) {
      args.push("-flags", "+global_header", "-f", "tee", `[f=flv:onfail=abort]${r.url}|${llhlsOutput(3 + index)}`);
    } else {
      args.push("-f", "flv", r.url);
    }
  });
  if (separateRecording) {
    args.push(
      "-map",
      "[rec]",
      "-map",
      audioIn,
      "-c:v",
      "libx265",
      "-preset",
      "ultrafast",
      "-crf",
      "26",
      "-tag:v",
      "hvc1",
    );
    args.push(...audio(128), "-f", "mp4", "-movflags", MP4_FLAGS, spec.recordingPath!);
  }
  return args;
}

export const ffmpegDriver: RecorderDriver = {
  name: "ffmpeg",
  start(spec: RecorderSpec): RecorderProcess {
    const source = spec.mediaSource ?? config.streaming.mediaSource;
    const resolved = { ...spec, mediaSource: source === undefined ? undefined : sourceUrl(spec, source) };
    const recorder = spawnGroup({
      stream: spec.streamName,
      command: config.streaming.ffmpegPath,
      args: ffmpegArgs(resolved),
      mediaPipes: spec.options.isLowLatency ? (spec.options.audioOnly ? 1 : renditions(spec).length) : 0,
      // ffmpeg's progress report: its first advance of out_time means every output is open and media flows.
      onLine(line) {
        const match = /^out_time_us=(\d+)/.exec(line);
        if (match && Number(match[1]) > 0) recorder.markReady();
      },
    });
    return recorder;
  },
};
