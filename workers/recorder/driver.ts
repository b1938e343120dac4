import type { Readable } from "node:stream";

/**
 * The seam between the recorder worker and what actually makes the stream: one small
 * interface, two drivers (ffmpeg, an operator command), chosen once in `driverFromConfig`.
 */
import type { StreamOptions } from "../../src/modules/streaming";

export interface RecorderSpec {
  streamId: string;
  streamName: string;
  room: string;
  accountId: string;
  options: StreamOptions;
  /** RTMP URL to publish the stream under its own name (variants add their suffix to it). */
  ingestUrl: string;
  /** External destinations, stream keys included: never log them. */
  destinations: string[];
  /** Local MP4 file to write, when the stream is recorded. */
  recordingPath?: string;
  /** The room's media, or undefined for a generated test pattern. */
  mediaSource?: string;
}

export interface RecorderExit {
  code: number | null;
  signal: string | null;
  /** A short reason with every URL cut down to its host, fit for the stream's row. */
  detail: string;
}

export interface RecorderProcess {
  /** Process group id of the recorder (its leader's pid). */
  pid: number;
  /** Resolves once the recorder publishes; rejects when it exits before that. */
  ready: Promise<void>;
  exited: Promise<RecorderExit>;
  /**
   * With is_low_latency, when the driver writes it: each rendition's fragmented MP4, best first, for the LL-HLS origin.
   */
  media?: Readable[];
  /** Asks the recorder to finish its files, and kills its whole process group after `graceMs`. */
  stop(graceMs: number): Promise<RecorderExit>;
}

export interface RecorderDriver {
  readonly name: string;
  start(spec: RecorderSpec): RecorderProcess;
}
