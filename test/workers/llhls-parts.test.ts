/**
 * LL-HLS parts on a live stream, beside the half minute of blocking reloads in llhls.test.ts: the
 * hinted part is streamed while it is written, every part that starts on a keyframe is
 * INDEPENDENT=YES (and the recorder's keyframe schedule makes the parts it says
 * independent), a segment is its parts and is H.264 and AAC, viewers count as players, and a
 * stopped stream's recording is its video on demand.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BoxSplitter, parseMoof, parseMoov, type Track } from "../../src/modules/streaming/llhls/fmp4";
import { sweep } from "../../src/modules/streaming/llhls/viewers";
import { lowLatencyKeyframes } from "../../workers/recorder/ffmpeg";
import { call } from "../helpers";
import { type LlhlsStack, startLlhlsStack } from "../support/llhls-stack";
import { parsePlaylist, partOf } from "../support/llhls-validator";
import { until } from "../support/wait";

let stack: LlhlsStack;
beforeAll(async () => {
  stack = await startLlhlsStack();
});
afterAll(async () => {
  await stack?.close();
});

const fetchBytes = async (url: URL) => Buffer.from(await (await fetch(url)).arrayBuffer());

/** Whether a part's first video sample is a sync sample, read from its fragments' own sample flags. */
function startsOnKeyframe(part: Buffer, tracks: Track[]): boolean {
  for (const box of new BoxSplitter().push(part)) {
    if (box.type !== "moof") continue;
    const video = parseMoof(box.bytes, tracks).find((r) => tracks.find((t) => t.id === r.trackId)?.handler === "vide");
    if (video) return video.startsWithSync;
  }
  throw new Error("a part without video");
}

async function probe(bytes: Uint8Array, name: string) {
  const path = join(tmpdir(), `parley-llhls-${process.pid}-${name}`);
  writeFileSync(path, bytes);
  const child = Bun.spawn(
    ["ffprobe", "-v", "error", "-show_entries", "stream=codec_name,width,height", "-of", "json", path],
    { stdout: "pipe" },
  );
  return JSON.parse(await new Response(child.stdout).text()).streams as { codec_name: string; width?: number }[];
}

describe("Parley's LL-HLS parts on a live stream", () => {
  test("hinted parts stream; parts on keyframes are independent; segments are their parts; VOD", async () => {
    const started = await stack.start({ room_name: "llhls-parts", is_low_latency: true, is_vod: true });
    expect(started.status).toBe(200);
    const { low_latency_hls_url: url, vod_url } = started.body;
    const master = await until(
      () => fetch(url).then((r) => (r.ok ? r.text() : "")),
      (text) => text.includes("index.m3u8"),
      20_000,
    );
    const variant = new URL(master.split("\n").find((l) => l.includes("index.m3u8"))!, url);
    // Three segments listed with their parts: the first (left out below) and two whole ones after it.
    let playlist = parsePlaylist(
      await until(
        () => fetch(variant).then((r) => r.text()),
        (text) => parsePlaylist(text).segments.filter((s) => s.uri && s.msn > 0 && s.parts.length > 0).length >= 2,
        30_000,
      ),
    );

    // The hinted part is answered as it is written: its first bytes come well before its end.
    // It is asked for right after a blocking reload names it; on a starved machine the request
    // can still arrive once the part is whole, so a few hints are tried and one must stream.
    const hintedParts: { chunks: number; spread: number }[] = [];
    for (let attempt = 0; attempt < 5 && !hintedParts.some((h) => h.chunks > 1 && h.spread > 100); attempt++) {
      const [nextMsn, nextPart] = partOf(playlist.preloadHint!);
      const blocking = new URL(variant);
      blocking.searchParams.set("_HLS_msn", String(nextMsn));
      blocking.searchParams.set("_HLS_part", String(nextPart));
      playlist = parsePlaylist(await (await fetch(blocking)).text());
      const [msn, part] = partOf(playlist.preloadHint!);
      const hinted = await fetch(new URL(`${msn}.${part}.m4s`, variant));
      expect(hinted.status).toBe(200);
      expect(hinted.headers.get("cache-control")).toContain("immutable");
      const reader = hinted.body!.getReader();
      const chunks: Uint8Array[] = [];
      let first: number | undefined;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        first ??= performance.now();
        chunks.push(value);
      }
      hintedParts.push({ chunks: chunks.length, spread: performance.now() - first! });
      const streamed = Buffer.concat(chunks);
      const again = Buffer.from(await (await fetch(new URL(`${msn}.${part}.m4s`, variant))).arrayBuffer());
      expect(again.equals(streamed)).toBe(true);
    }
    expect(
      hintedParts.filter((h) => h.chunks > 1 && h.spread > 100),
      JSON.stringify(hintedParts),
    ).toHaveLength(1);

    // Every part that starts on a keyframe says INDEPENDENT=YES, and no other does; the recorder puts one every
    // STREAMING_LLHLS_KEYFRAME_MS (rounded to whole parts) from each segment's start, and those parts are the
    // independent ones. The stream's first segment is left out: the encoder stretches its first frame.
    const init = Buffer.from(await (await fetch(new URL("init.mp4", variant))).arrayBuffer());
    const tracks = parseMoov(init.subarray(init.indexOf("moov", 0, "latin1") - 4));
    const { partFrames, keyframeFrames } = lowLatencyKeyframes();
    const listed = playlist.segments.filter((s) => s.uri && s.msn > 0 && s.parts.length > 0);
    expect(listed.length).toBeGreaterThanOrEqual(2);
    for (const segment of listed) {
      const independent = await Promise.all(
        segment.parts.map(async (p) => startsOnKeyframe(await fetchBytes(new URL(p.uri, variant)), tracks)),
      );
      const where = `segment ${segment.msn}`;
      expect(
        segment.parts.map((p) => p.independent),
        where,
      ).toEqual(independent);
      expect(independent, where).toEqual(segment.parts.map((_, index) => (index * partFrames) % keyframeFrames === 0));
    }

    // A whole segment is its parts, and with the init segment it is H.264 and AAC.
    const whole = playlist.segments.filter((s) => s.uri).at(-1)!;
    const segment = Buffer.from(await (await fetch(new URL(whole.uri!, variant))).arrayBuffer());
    const parts = await Promise.all(
      whole.parts.map(async (p) => Buffer.from(await (await fetch(new URL(p.uri, variant))).arrayBuffer())),
    );
    expect(parts.length).toBeGreaterThan(0);
    expect(Buffer.concat(parts).equals(segment)).toBe(true);
    const streams = await probe(Buffer.concat([init, segment]), "segment.mp4");
    expect(streams.map((s) => s.codec_name).sort()).toEqual(["aac", "h264"]);

    // Unknown streams and renditions are 404 in the one error shape.
    const missing = await fetch(`${stack.base}/llhls/v1/live/no-such-stream.m3u8`);
    expect(missing.status).toBe(404);
    expect((await missing.json()).error.code).toBe("not_found");
    expect((await fetch(new URL("../v3/index.m3u8", variant))).status).toBe(404);

    // Players' requests are answered by a route of Bun's own (llhls/route.ts), any other by the
    // app's pipeline, which validates it: both carry the request id and answer errors alike.
    const asked = await fetch(variant, { headers: { "x-request-id": "player-7" } });
    expect(asked.headers.get("x-request-id")).toBe("player-7");
    expect((await fetch(variant)).headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
    const [plain, decoded] = await Promise.all(
      ["_HLS_msn=x", "_HLS_msn=x%20"].map(async (query) => {
        const refused = await fetch(`${variant.href}&${query}`);
        return { status: refused.status, id: refused.headers.get("x-request-id"), body: await refused.json() };
      }),
    );
    expect(plain!.status).toBe(400);
    expect(plain!.id).toBeTruthy();
    expect(plain!.body).toEqual({ error: { code: "bad_request", message: "_HLS_msn must be a whole number" } });
    expect(decoded).toEqual({ ...plain!, id: decoded!.id });
    const unstorable = await fetch(`${variant.href}&_HLS_msn=%00`);
    expect(unstorable.status).toBe(400);
    expect((await unstorable.json()).error.message).toContain("NUL");

    // Stopped: the playlist ends and names no part to come, and the recording is the video on demand.
    expect((await stack.stop("llhls-parts")).status).toBe(200);
    const ended = await until(
      () => fetch(variant).then((r) => r.text()),
      (text) => text.includes("#EXT-X-ENDLIST"),
      10_000,
    );
    expect(ended).toContain("#EXT-X-ENDLIST");
    expect(ended).not.toContain("#EXT-X-PRELOAD-HINT");
    // The recording is uploaded once the recorder has ended: on a busy machine after the playlist ended.
    const vod = await until(
      () => fetch(vod_url, { redirect: "manual" }),
      (answer) => answer.status !== 404,
      30_000,
    );
    expect(vod.status).toBe(302);
    const recording = await fetch(vod.headers.get("location")!);
    expect(recording.status).toBe(200);
    const recorded = await probe(new Uint8Array(await recording.arrayBuffer()), "vod.mp4");
    expect(recorded.map((s) => s.codec_name).sort()).toEqual(["aac", "h264"]);
  }, 90_000);

  test("viewers are counted as players, however often they reload", async () => {
    const started = await stack.start({ room_name: "llhls-viewers", is_low_latency: true });
    expect(started.status).toBe(200);
    const { low_latency_hls_url: url, stream_name: name } = started.body;
    const count = async () =>
      (await call("GET", `/llhls/v1/hooks/srs/live/viewers/count/${name}`)).body[name].current_viewers as number;
    expect(await count()).toBe(0);

    // Two players, each with its own variant address, reloading on every part, eight times each (about three
    // seconds of parts); the ceiling is for a machine running two suites.
    const players = await Promise.all(
      [1, 2].map(async () => {
        const master = await until(() => fetch(url).then((r) => (r.ok ? r.text() : "")), Boolean, 20_000);
        return new URL(master.split("\n").find((l) => l.includes("index.m3u8"))!, url);
      }),
    );
    let reloads = 0;
    await Promise.all(
      players.map(async (variant) => {
        let hint = parsePlaylist(await (await fetch(variant)).text()).preloadHint!;
        const end = Date.now() + 20_000;
        for (let own = 0; own < 8 && Date.now() < end; own++) {
          const [msn, part] = partOf(hint);
          const text = await (await fetch(`${variant.href}&_HLS_msn=${msn}&_HLS_part=${part}`)).text();
          hint = parsePlaylist(text).preloadHint!;
          reloads++;
        }
      }),
    );
    expect(reloads).toBeGreaterThan(15);
    expect(await until(count, (n) => n === 2)).toBe(2);
    // Once they have been silent long enough, they leave the count.
    await sweep(Date.now() + 25_000);
    expect(await count()).toBe(0);
    expect((await stack.stop("llhls-viewers")).status).toBe(200);
  }, 60_000);
});
