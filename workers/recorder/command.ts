/**
 * The operator's own recorder (for example a headless conference client that joins the
 * room and publishes it): `STREAMING_RECORDER_COMMAND` run by `sh -c` as its own process
 * group, with the stream's settings in PARLEY_* variables. It tells Parley it publishes by
 * writing a line `ready` on stdout; SIGTERM asks it to finish, SIGKILL follows after the grace.
 */
import { config } from "../../src/core/config";
import { BITRATE_LADDER, RECONNECT_WINDOW_UNIT_MS } from "../../src/modules/streaming";
import type { RecorderDriver, RecorderProcess, RecorderSpec } from "./driver";
import { spawnGroup } from "./process";

export function commandEnvironment(spec: RecorderSpec): Record<string, string> {
  const options = spec.options;
  return {
    PARLEY_STREAM_ID: spec.streamId,
    PARLEY_STREAM_NAME: spec.streamName,
    PARLEY_ROOM: spec.room,
    PARLEY_RTMP_URL: spec.ingestUrl,
    // Stream keys travel in the environment, never on a command line other users can read.
    PARLEY_DESTINATIONS: spec.destinations.join("\n"),
    PARLEY_RECORDING_PATH: spec.recordingPath ?? "",
    PARLEY_MEDIA_SOURCE: spec.mediaSource ?? config.streaming.mediaSource ?? "",
    PARLEY_CODEC: options.codec,
    PARLEY_LOW_LATENCY: String(options.isLowLatency),
    PARLEY_MULTI_BITRATE: String(options.multiBitrate),
    PARLEY_VARIANTS: options.multiBitrate
      ? BITRATE_LADDER.map((v) => `${spec.ingestUrl}${v.suffix} ${v.width}x${v.height} ${v.totalKbps}`).join("\n")
      : "",
    PARLEY_AUDIO_ONLY: String(options.audioOnly),
    PARLEY_USERNAME: String(options.username),
    PARLEY_LAYOUT: options.layout,
    PARLEY_PROFILE: options.profile,
    PARLEY_RECONNECT_WINDOW_MS: String(options.reconnectWindow * RECONNECT_WINDOW_UNIT_MS),
  };
}

export function commandDriver(command: string): RecorderDriver {
  return {
    name: "command",
    start(spec: RecorderSpec): RecorderProcess {
      const recorder = spawnGroup({
        stream: spec.streamName,
        command: "sh",
        args: ["-c", command],
        env: commandEnvironment(spec),
        onLine(line) {
          if (line.trim().toLowerCase() === "ready") recorder.markReady();
        },
      });
      return recorder;
    },
  };
}
