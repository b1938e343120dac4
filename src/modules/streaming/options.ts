/**
 * What a stream was asked to do, as stored with it and handed to its recorder. Free of any
 * other module, so the recorder drivers can read it without the rest of streaming.
 */

/** The spec's reconnect_window unit: 6000 is one minute, so one unit is 10 ms. */
export const RECONNECT_WINDOW_UNIT_MS = 10;

/** What the recorder was asked to do; stream keys are never part of it. */
export interface StreamOptions {
  codec: "H264" | "H265";
  isLowLatency: boolean;
  isRecording: boolean;
  multiBitrate: boolean;
  isVod: boolean;
  username: boolean;
  audioOnly: boolean;
  layout: "desktop" | "mobile";
  profile: "adaptive" | "HD";
  /** In the spec's unit: 6000 = one minute, so one unit is 10 ms. */
  reconnectWindow: number;
  /** Platform names of stream_keys, for the record; the keys themselves are not stored. */
  platforms: string[];
  destinationCount: number;
}

export function wantsRecording(options: StreamOptions): boolean {
  return options.isRecording || options.isVod;
}
