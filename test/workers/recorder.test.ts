/**
 * End to end on real parts: nginx with libnginx-mod-rtmp as the media server, ffmpeg as
 * the recorder (short test-pattern streams), s3rver as storage, Parley listening for the
 * media server's callbacks.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GetObjectCommand, HeadObjectCommand } from "@aws-sdk/client-s3";
import { eq } from "drizzle-orm";
import { createApp } from "../../src/process/app";
import { config, overrideConfig } from "../../src/core/config";
import { db } from "../../src/db/client";
import { streams } from "../../src/modules/streaming/schema";
import { stopStateSubscriber } from "../../src/modules/streaming/state";
import { redis, redisKey } from "../../src/queue/connection";
import { bucket, s3Client } from "../../src/storage/s3";
import { type RecorderWorker, startRecorderWorker } from "../../workers/recorder";
import { ffmpegDriver } from "../../workers/recorder/ffmpeg";
import { call, newAccount } from "../helpers";
import { type NginxRtmp, startNginxRtmp } from "../support/nginx-rtmp";
import { isAlive as alive, until } from "../support/wait";

const SECRET = "e2e-callback-secret";
const work = mkdtempSync(join(tmpdir(), "parley-e2e-"));
let restoreConfig: () => void;
let api: ReturnType<ReturnType<typeof createApp>["listen"]>;
let nginx: NginxRtmp;
let worker: RecorderWorker | undefined;
let account: Awaited<ReturnType<typeof newAccount>>;

const auth = () => ({ authorization: account.apiKey });
const start = (body: unknown) => call("POST", "/terraform/v1/hooks/srs/startRecording", { body, headers: auth() });
const stop = (room_name: string) =>
  call("POST", "/terraform/v1/hooks/srs/stopRecording", { body: { room_name }, headers: auth() });
const row = async (streamName: string) =>
  (await db.select().from(streams).where(eq(streams.streamName, streamName)))[0]!;

/** Processes whose command line mentions `text`. */
function processesMentioning(text: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, "utf8").includes(text)) found.push(Number(entry));
    } catch {}
  }
  return found;
}

const text = (url: string) => fetch(url).then((response) => (response.ok ? response.text() : ""));
const segmentsOf = (playlist: string) => playlist.split("\n").filter((line) => line.endsWith(".ts"));

/** ffprobe's view of a file's streams. */
async function probe(bytes: ArrayBuffer, name: string) {
  const path = join(work, name);
  writeFileSync(path, Buffer.from(bytes));
  const child = Bun.spawn(
    [
      "ffprobe",
      "-v",
      "error",
      "-count_packets",
      "-show_entries",
      "stream=codec_type,codec_name,width,height,nb_read_packets:format=duration",
      "-of",
      "json",
      path,
    ],
    { stdout: "pipe" },
  );
  const output = JSON.parse(await new Response(child.stdout).text());
  return {
    streams: output.streams as {
      codec_type: string;
      codec_name: string;
      width?: number;
      height?: number;
      nb_read_packets?: string;
    }[],
    duration: Number(output.format?.duration),
  };
}

async function firstSegment(playlistUrl: string, name: string) {
  const playlist = await until(
    () => text(playlistUrl),
    (body) => segmentsOf(body).length > 0,
  );
  const segment = segmentsOf(playlist)[0]!;
  const bytes = await fetch(new URL(segment, playlistUrl)).then((response) => response.arrayBuffer());
  return { playlist, probed: await probe(bytes, name) };
}

beforeAll(async () => {
  api = createApp().listen({ hostname: "127.0.0.1", port: 0 });
  const base = `http://127.0.0.1:${api.server!.port}`;
  nginx = await startNginxRtmp(base, SECRET);
  restoreConfig = overrideConfig({
    streaming: {
      ...nginx.settings,
      llhlsBaseUrl: `${base}/llhls/v1/live`,
      vodBaseUrl: `${base}/vod/v1`,
      x264Preset: "ultrafast",
      callbackSecret: SECRET,
      callbackAddresses: ["127.0.0.1", "::ffff:127.0.0.1", "::1"],
      destinationHosts: ["127.0.0.1"],
      recordingDir: join(work, "recordings"),
    },
  });
  account = await newAccount();
  worker = await startRecorderWorker(ffmpegDriver);
});

afterAll(async () => {
  await worker?.stop();
  await nginx.stop();
  await api.stop(true);
  await stopStateSubscriber();
  restoreConfig();
});

describe("ffmpeg recorder through nginx-rtmp", () => {
  test("HLS and low-latency HLS play, a puller is counted, the MP4 lands in the bucket and the VOD plays", async () => {
    const destination = `rtmp://127.0.0.1:${nginx.rtmpPort}/direct/destination-key`;
    const started = await start({
      room_name: "e2e-main",
      is_recording: true,
      is_vod: true,
      is_low_latency: true,
      // One destination that takes the stream, one that refuses it: the refusal is dropped, the stream goes on.
      stream_urls: [destination, "rtmp://127.0.0.1:1/nowhere/dead-key"],
    });
    expect(started.status).toBe(200);
    const stream = started.body;
    // Probed meanwhile: ffprobe waits seconds for the pushed stream's next keyframe, as the HLS checks below do.
    const pushed = Bun.spawn(
      ["ffprobe", "-v", "error", "-show_entries", "stream=codec_name", "-of", "csv=p=0", destination],
      { stdout: "pipe" },
    );
    const pushedCodecs = new Response(pushed.stdout).text();

    const hls = await firstSegment(stream.hls_url, "main.ts");
    const kinds = hls.probed.streams.map((s) => `${s.codec_type}:${s.codec_name}`).sort();
    expect(kinds).toEqual(["audio:aac", "video:h264"]);
    expect(hls.probed.streams.find((s) => s.codec_type === "video")).toMatchObject({ width: 1280, height: 720 });

    // Low-latency HLS comes from Parley's own origin (test/workers/llhls.test.ts follows it at length).
    const master = await until(
      () => text(stream.low_latency_hls_url),
      (body) => body.includes("index.m3u8"),
    );
    const variant = new URL(
      master.split("\n").find((line) => line.includes("index.m3u8"))!,
      stream.low_latency_hls_url,
    );
    // Read without the viewer id the playlist hands players, so this look is not counted as a viewer below.
    variant.search = "";
    const lowLatency = await until(
      () => text(variant.href),
      (body) => body.includes("#EXT-X-PART:"),
    );
    expect(lowLatency).toContain("#EXT-X-PART-INF:PART-TARGET=0.333");

    expect((await pushedCodecs).split("\n").filter(Boolean).sort()).toEqual(["aac", "h264"]);

    const count = async () =>
      (await call("GET", `/terraform/v1/hooks/srs/live/viewers/count/${stream.stream_name}`)).body[stream.stream_name];
    expect((await count()).current_viewers).toBe(0);
    // Copied, not decoded: it only has to be a player the media server counts.
    const puller = Bun.spawn(
      ["ffmpeg", "-nostdin", "-loglevel", "quiet", "-i", stream.rtmp_url, "-t", "20", "-c", "copy", "-f", "null", "-"],
      {
        stdout: "ignore",
        stderr: "ignore",
      },
    );
    expect((await until(count, (now) => now.current_viewers === 1)).current_viewers).toBe(1);
    puller.kill("SIGKILL");
    expect((await until(count, (now) => now.current_viewers === 0)).current_viewers).toBe(0);
    expect((await count()).uptime).toBeGreaterThanOrEqual(1);

    const stopped = await stop("e2e-main");
    expect(stopped.status).toBe(200);
    const finished = await row(stream.stream_name);
    expect(finished.state).toBe("stopped");
    expect(finished.recordingKey).toBe(`${account.accountId}/recordings/${stream.stream_name}.mp4`);
    const head = await (await s3Client()).send(
      new HeadObjectCommand({ Bucket: bucket(), Key: finished.recordingKey! }),
    );
    expect(head.ContentLength).toBeGreaterThan(10_000);

    const vod = await fetch(stream.vod_url);
    expect(vod.status).toBe(200);
    const recording = await probe(await vod.arrayBuffer(), "vod.mp4");
    expect(recording.streams.map((s) => s.codec_name).sort()).toEqual(["aac", "h264"]);
    expect(recording.duration).toBeGreaterThan(1);
    expect(processesMentioning(stream.stream_name)).toEqual([]);
  }, 60_000);

  test("multi_bitrate: five variants under one master playlist, HLS and LL-HLS with rendition reports", async () => {
    const started = await start({ room_name: "e2e-ladder", multi_bitrate: true, is_low_latency: true });
    expect(started.status).toBe(200);
    const master = await until(
      () => text(started.body.hls_url),
      (body) => (body.match(/#EXT-X-STREAM-INF/g) ?? []).length === 5,
    );
    const entries = [...master.matchAll(/#EXT-X-STREAM-INF:[^\n]*BANDWIDTH=(\d+),RESOLUTION=(\d+x\d+)\n(\S+)/g)].map(
      (m) => ({
        bandwidth: Number(m[1]),
        resolution: m[2],
        uri: m[3]!,
      }),
    );
    expect(entries.map((e) => [e.bandwidth, e.resolution])).toEqual([
      [2628000, "1280x720"],
      [1128000, "854x480"],
      [878000, "640x360"],
      [528000, "426x240"],
      [264000, "426x240"],
    ]);
    // All at once: each waits for its variant's first segment, which the five encodes write side by side.
    const firsts = await Promise.all(
      entries.map((entry) =>
        firstSegment(new URL(entry.uri, started.body.hls_url).toString(), `variant-${entry.bandwidth}.ts`),
      ),
    );
    for (const [index, { probed }] of firsts.entries()) {
      const video = probed.streams.find((s) => s.codec_type === "video")!;
      expect(`${video.width}x${video.height}`).toBe(entries[index]!.resolution);
    }

    // The LL-HLS multivariant playlist lists the same ladder; each quality's playlist reports the four others.
    const llMaster = await until(
      () => text(started.body.low_latency_hls_url),
      (body) => body.includes("index.m3u8"),
    );
    const variants = [
      ...llMaster.matchAll(/#EXT-X-STREAM-INF:BANDWIDTH=(\d+),RESOLUTION=(\d+x\d+),CODECS="[^"]+"\n(\S+)/g),
    ];
    expect(variants.map((m) => [Number(m[1]), m[2]])).toEqual(entries.map((e) => [e.bandwidth, e.resolution]));
    const lowest = new URL(variants[4]![3]!, started.body.low_latency_hls_url);
    lowest.search = "";
    const reported = await until(
      () => text(lowest.href),
      (body) => (body.match(/#EXT-X-RENDITION-REPORT/g) ?? []).length === 4,
    );
    expect(
      [...reported.matchAll(/#EXT-X-RENDITION-REPORT:URI="\.\.\/(v\d)\/index\.m3u8",LAST-MSN=\d+,LAST-PART=\d+/g)].map(
        (m) => m[1],
      ),
    ).toEqual(["v0", "v1", "v2", "v3"]);
    expect((await stop("e2e-ladder")).status).toBe(200);
  }, 60_000);

  test("audio_only publishes AAC alone; H265 makes the recording HEVC", async () => {
    // Side by side, so the HEVC stream's wait for its first segment covers the audio stream's.
    const [audio, hevc] = await Promise.all([
      start({ room_name: "e2e-audio", audio_only: true }),
      start({ room_name: "e2e-hevc", codec: "H265", is_recording: true }),
    ]);
    expect(audio.status).toBe(200);
    expect(hevc.status).toBe(200);
    const [{ probed }] = await Promise.all([
      firstSegment(audio.body.hls_url, "audio.ts"),
      firstSegment(hevc.body.hls_url, "hevc-live.ts"),
    ]);
    // nginx-rtmp's MPEG-TS always declares a video stream; an audio-only one carries no video packets.
    const packets = (type: string) =>
      probed.streams.filter((s) => s.codec_type === type).reduce((sum, s) => sum + Number(s.nb_read_packets ?? 0), 0);
    expect(probed.streams.find((s) => s.codec_type === "audio")?.codec_name).toBe("aac");
    expect(packets("audio")).toBeGreaterThan(0);
    expect(packets("video")).toBe(0);
    expect((await stop("e2e-audio")).status).toBe(200);
    expect((await stop("e2e-hevc")).status).toBe(200);
    const finished = await row(hevc.body.stream_name);
    const object = await (await s3Client()).send(
      new GetObjectCommand({ Bucket: bucket(), Key: finished.recordingKey! }),
    );
    const recording = await probe((await object.Body!.transformToByteArray()).buffer as ArrayBuffer, "hevc.mp4");
    expect(recording.streams.map((s) => s.codec_name).sort()).toEqual(["aac", "hevc"]);
  }, 60_000);

  test("a killed worker leaves no ffmpeg behind, and the next worker fails its stream", async () => {
    await worker!.stop();
    worker = undefined;
    const pod = `e2e-child-${process.pid}`;
    const s = config.streaming;
    const child = Bun.spawn([process.execPath, "src/index.ts", "--role=recorder"], {
      env: {
        ...process.env,
        LOG_LEVEL: "silent",
        STREAMING_POD_NAME: pod,
        STREAMING_RTMP_INGEST_URL: s.rtmpIngestUrl,
        STREAMING_X264_PRESET: "ultrafast",
        STREAMING_RECORDING_DIR: s.recordingDir,
      },
      stdout: "ignore",
      stderr: "inherit",
    });
    try {
      const started = await start({ room_name: "e2e-killed", is_recording: true });
      expect(started.status).toBe(200);
      expect(started.body.pod_name).toBe(pod);
      const running = await row(started.body.stream_name);
      expect(alive(running.pid!)).toBe(true);

      child.kill("SIGKILL");
      await child.exited;
      const leftovers = await until(
        async () => processesMentioning(started.body.stream_name),
        (pids) => pids.length === 0,
        5_000,
      );
      expect(leftovers).toEqual([]);
      // The recorder's own process ends with them, though on a busy machine a moment later.
      expect(
        await until(
          async () => alive(running.pid!),
          (living) => !living,
          5_000,
        ),
      ).toBe(false);

      // The dead worker's heartbeat would lapse within seconds; drop it now instead of waiting.
      await redis().del(redisKey("recorder", "pod", pod));
      worker = await startRecorderWorker(ffmpegDriver);
      const reconciled = await row(started.body.stream_name);
      expect(reconciled).toMatchObject({ state: "failed", reason: "recorder_lost" });
      // What it recorded before dying is kept.
      expect(reconciled.recordingKey).toBe(`${account.accountId}/recordings/${started.body.stream_name}.mp4`);
    } finally {
      child.kill("SIGKILL");
    }
  }, 60_000);
});
