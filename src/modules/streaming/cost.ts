/**
 * What a stream costs a recorder worker, in units of one hundredth of a CPU core, from what it
 * asks for. Free of any other module but the ladder, so the worker reads it as the API does.
 * The figures are the ffmpeg recorder's, measured by test/bench/recorder-cost.bench.ts (the
 * table and the run are in docs/streaming.md).
 */
import { BITRATE_LADDER } from "./ladder";
import type { StreamOptions } from "./options";

export const STREAM_COSTS = {
  /** Audio: one AAC encode. An audio_only stream is this alone. */
  audio: 5,
  /** The top H.264 quality (720p, test pattern, the configured x264 preset). */
  video: 25,
  /** Each further quality of the multi_bitrate ladder, all smaller than the top one. */
  extraQuality: 12,
  /** LL-HLS fragmented MP4 for Parley's origin, per quality encoded (the worker packages them too). */
  lowLatencyPerQuality: 2,
  /** The MP4 kept for is_recording / is_vod: a mux of what is encoded already. */
  recording: 1,
  /** An H.265 recording is a separate libx265 encode of the top quality (RTMP carries H.264). */
  h265Recording: 50,
} as const;

export function streamCost(options: StreamOptions): number {
  const c = STREAM_COSTS;
  const qualities = options.audioOnly ? 0 : options.multiBitrate ? BITRATE_LADDER.length : 1;
  let units = c.audio;
  if (qualities > 0) units += c.video + (qualities - 1) * c.extraQuality;
  if (options.isLowLatency) units += c.lowLatencyPerQuality * Math.max(1, qualities);
  if (options.isRecording || options.isVod) {
    units += c.recording;
    if (options.codec === "H265" && qualities > 0) units += c.h265Recording;
  }
  return units;
}
