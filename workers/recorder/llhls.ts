/**
 * A low-latency stream's LL-HLS packaging on the recorder's machine: each rendition's
 * fragmented MP4 is cut into parts and segments (src/modules/streaming/llhls/cutter.ts) and
 * published to Redis, where any API process serves it. The ffmpeg driver writes the fMP4
 * itself; for a driver that only publishes RTMP (the command driver), a copying ffmpeg per
 * rendition pulls it back from the media server once the recorder is ready.
 */
import type { Readable } from "node:stream";
import { config } from "../../src/core/config";
import { log } from "../../src/core/log";
import {
  BITRATE_LADDER,
  codecsOf,
  Cutter,
  type RenditionInfo,
  SKIP_TARGET_DURATIONS,
  StreamPublisher,
} from "../../src/modules/streaming";
import type { RecorderProcess, RecorderSpec } from "./driver";
import { lowLatencyKeyframeS, MP4_FLAGS, renditions } from "./ffmpeg";
import { spawnGroup } from "./process";

export interface LowLatencyPackaging {
  /** The recorder has ended: the parts being written close and every playlist gets its end. */
  finish(): Promise<void>;
}

function renditionInfos(spec: RecorderSpec): RenditionInfo[] {
  if (spec.options.audioOnly) return [{ name: "v0", bandwidth: 128_000 }];
  return renditions(spec).map((r, index) => ({
    name: `v${index}`,
    bandwidth: (r.videoKbps + r.audioKbps) * 1000,
    width: r.width,
    height: r.height,
  }));
}

/** Starts cutting the recorder's media. */
export function packageLowLatency(spec: RecorderSpec, recorder: RecorderProcess): LowLatencyPackaging {
  const s = config.streaming;
  const infos = renditionInfos(spec);
  const publisher = new StreamPublisher(spec.streamName, infos);
  const segmentS = s.llhlsSegmentMs / 1000;
  const options = {
    partTargetS: s.llhlsPartMs / 1000,
    segmentS,
    // The recorder's own encodes follow its keyframe schedule; a copy of what an operator's
    // recorder published is only known to have one every segment.
    keyframeS: recorder.media ? lowLatencyKeyframeS() : segmentS,
    // Long enough that delta updates have something to skip (CAN-SKIP-UNTIL is six target durations).
    windowSegments: Math.ceil((SKIP_TARGET_DURATIONS * Math.ceil(segmentS)) / segmentS) + 4,
  };
  const cutters: Cutter[] = [];
  const pulls = new Set<RecorderProcess>();
  const drained: Promise<void>[] = [];
  let finishing = false;

  const cutterFor = (name: string) => {
    const cutter = new Cutter(options, {
      init: (bytes) => publisher.init(name, bytes, codecsOf(bytes)),
      chunk: (msn, part, bytes) => publisher.chunk(name, msn, part, bytes),
      part: (window) => publisher.window(name, window),
    });
    cutters.push(cutter);
    return cutter;
  };
  const feed = (cutter: Cutter, name: string, media: Readable) => {
    const onData = (data: Buffer) => {
      try {
        cutter.push(data);
      } catch (error) {
        // The recorder must never block on a full pipe: what cannot be cut is read and dropped.
        log.error(
          { stream: spec.streamName, rendition: name, err: (error as Error).message },
          "LL-HLS packaging stopped: unreadable media",
        );
        media.off("data", onData);
        media.resume();
      }
    };
    media.on("data", onData);
    media.on("error", () => {});
    drained.push(new Promise((resolve) => media.once("close", () => resolve())));
  };

  /**
   * Pulls one quality back from the media server. Tried again while nothing has come (the
   * recorder may say it is ready a moment before the media server plays its stream); a pull
   * lost after its first bytes ends that quality's LL-HLS, since a new one would start a new
   * fMP4 stream under the same playlist.
   */
  const pull = (cutter: Cutter, name: string, url: string, deadline: number) => {
    const copy = spawnGroup({
      stream: spec.streamName,
      command: s.ffmpegPath,
      args: [
        "-hide_banner",
        "-nostdin",
        "-loglevel",
        "error",
        "-i",
        url,
        "-map",
        "0",
        "-c",
        "copy",
        "-f",
        "mp4",
        "-movflags",
        MP4_FLAGS,
        "-frag_duration",
        "40000",
        "pipe:3",
      ],
      mediaPipes: 1,
      onLine() {},
    });
    pulls.add(copy);
    const media = copy.media![0]!;
    let received = false;
    media.once("data", () => (received = true));
    feed(cutter, name, media);
    void copy.exited.then((exit) => {
      pulls.delete(copy);
      if (finishing) return;
      if (!received && Date.now() < deadline) setTimeout(() => !finishing && pull(cutter, name, url, deadline), 500);
      else
        log.warn(
          { stream: spec.streamName, rendition: name, exit: exit.detail },
          "LL-HLS pull from the media server ended",
        );
    });
  };

  if (recorder.media) {
    recorder.media.forEach((media, index) => {
      feed(cutterFor(infos[index]!.name), infos[index]!.name, media);
    });
  } else {
    // Pulled once the recorder publishes; each copy is a process group of its own, stopped with the stream.
    void recorder.ready.then(() => {
      const deadline = Date.now() + s.operationTimeoutMs;
      infos.forEach((info, index) => {
        const suffix = spec.options.multiBitrate ? BITRATE_LADDER[index]!.suffix : "";
        pull(cutterFor(info.name), info.name, `${spec.ingestUrl}${suffix}`, deadline);
      });
    });
  }

  return {
    async finish() {
      finishing = true;
      await Promise.all([...pulls].map((copy) => copy.stop(1_000)));
      // What the recorder wrote last is still cut before the playlists end.
      await Promise.race([Promise.all(drained), Bun.sleep(1_000)]);
      for (const cutter of cutters) {
        const window = cutter.finish();
        if (window) log.info({ stream: spec.streamName, segments: window.segments.length }, "LL-HLS stream ended");
      }
    },
  };
}
