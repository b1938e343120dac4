/**
 * What a stream costs a recorder worker, in units of one hundredth of a CPU core, from what it
 * asks for. Free of any other module but the ladder, so the worker reads it as the API does.
 * The figures are the table of docs/streaming.md (provisional: see there how they are to be measured).
 */
import { BITRATE_LADDER } from "./ladder";
import type { StreamOptions } from "./options";

export const STREAM_COSTS = {
  /** Audio alone: an AAC encode, no video at all. */
  audioOnly: 5,
  /** One H.264 quality (the top one, 720p at the configured x264 preset). */
  video: 25,
  /** Each further quality of the multi_bitrate ladder, all smaller than the top one. */
  extraQuality: 10,
  /** H.265 encodes cost this many times H.264's video. */
  h265Factor: 2,
  /** Packaging the renditions as LL-HLS parts for Parley's own origin. */
  lowLatency: 5,
  /** Writing the MP4 kept for is_recording / is_vod (a mux of what is encoded already). */
  recording: 2,
} as const;

export function streamCost(options: StreamOptions): number {
  const c = STREAM_COSTS;
  let units = c.audioOnly;
  if (!options.audioOnly) {
    const qualities = options.multiBitrate ? BITRATE_LADDER.length : 1;
    const video = c.video + (qualities - 1) * c.extraQuality;
    units += options.codec === "H265" ? video * c.h265Factor : video;
  }
  if (options.isLowLatency) units += c.lowLatency;
  if (options.isRecording || options.isVod) units += c.recording;
  return units;
}
