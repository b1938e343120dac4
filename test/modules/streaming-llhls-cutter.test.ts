/**
 * The LL-HLS cutter and playlist model on fragmented MP4 written by a real ffmpeg (the same
 * flags the recorder uses): segments on the keyframe schedule, parts within the part target,
 * parts that add up to their segment byte for byte, and playlists the RFC checker accepts.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import { Cutter } from "../../src/modules/streaming/llhls/cutter";
import { BoxSplitter, parseMoof, parseMoov } from "../../src/modules/streaming/llhls/fmp4";
import {
  blockingAnswer,
  codecsOf,
  mediaPlaylist,
  parseDirectives,
  type RenditionWindow,
} from "../../src/modules/streaming/llhls/window";
import { checkPlaylist, deltaMatches, parsePlaylist, ReloadHistory } from "../support/llhls-validator";

let media: Buffer;
let audioOnly: Buffer;
/** The same with the low-latency schedule: a keyframe opening every 2 s segment and every `n`-th part (8 frames). */
const keyframedEvery = new Map<number, Buffer>();

async function ffmpeg(args: string[]): Promise<Buffer> {
  const run = Bun.spawn(
    [
      "ffmpeg",
      "-hide_banner",
      "-loglevel",
      "error",
      ...args,
      "-f",
      "mp4",
      "-movflags",
      "+frag_keyframe+empty_moov+default_base_moof",
      "-frag_duration",
      "40000",
      "pipe:1",
    ],
    {
      stdout: "pipe",
      stderr: "inherit",
    },
  );
  const bytes = Buffer.from(await new Response(run.stdout).arrayBuffer());
  expect(await run.exited).toBe(0);
  return bytes;
}

/** 21 s of 25 fps video, keyframes where `keyframes` (an ffmpeg expression) says, and AAC, faster than real time. */
const encode = (keyframes: string) =>
  ffmpeg([
    "-f",
    "lavfi",
    "-i",
    "testsrc2=size=320x180:rate=25",
    "-f",
    "lavfi",
    "-i",
    "sine=frequency=440:sample_rate=48000",
    "-t",
    "21",
    "-map",
    "0:v",
    "-map",
    "1:a",
    "-c:v",
    "libx264",
    "-preset",
    "ultrafast",
    "-tune",
    "zerolatency",
    "-force_key_frames",
    keyframes,
    "-sc_threshold",
    "0",
    "-c:a",
    "aac",
    "-b:a",
    "64k",
  ]);

beforeAll(async () => {
  // A keyframe every 2 s: what the recorder publishes with STREAMING_LLHLS_KEYFRAME_MS at the segment.
  media = await encode("expr:gte(t,n_forced*2)");
  // The recorder's own low-latency schedule (workers/recorder/ffmpeg.ts) for every part and every other part.
  for (const parts of [1, 2]) keyframedEvery.set(parts, await encode(`expr:eq(mod(mod(n,50),${8 * parts}),0)`));
  audioOnly = await ffmpeg([
    "-f",
    "lavfi",
    "-i",
    "sine=frequency=440:sample_rate=48000",
    "-t",
    "7",
    "-c:a",
    "aac",
    "-b:a",
    "64k",
  ]);
}, 60_000);

interface Cut {
  init?: Buffer;
  parts: Map<string, Buffer[]>;
  windows: RenditionWindow[];
  cutter: Cutter;
}

function cut(bytes: Buffer, chunkSize: number, keyframeS = 2, partTargetS = 0.33334): Cut {
  const result: Cut = { parts: new Map(), windows: [], cutter: undefined as never };
  result.cutter = new Cutter(
    { partTargetS, segmentS: 2, keyframeS, windowSegments: 10, now: () => Date.UTC(2026, 0, 1) },
    {
      init: (init) => (result.init = init),
      chunk: (msn, part, chunk) => {
        const key = `${msn}.${part}`;
        result.parts.set(key, [...(result.parts.get(key) ?? []), chunk]);
      },
      part: (window) => result.windows.push(window),
    },
  );
  for (let offset = 0; offset < bytes.length; offset += chunkSize)
    result.cutter.push(bytes.subarray(offset, offset + chunkSize));
  result.cutter.finish();
  return result;
}

describe("fragmented MP4", () => {
  test("the init segment names an H.264 video and an AAC track, and fragments start on keyframes every 2 s", () => {
    const { init } = cut(media, 4096);
    const tracks = parseMoov(init!.subarray(init!.indexOf("moov", 0, "latin1") - 4));
    expect(tracks.map((t) => t.handler).sort()).toEqual(["soun", "vide"]);
    expect(codecsOf(init!)).toMatch(/^avc1\.[0-9a-f]{6},mp4a\.40\.2$/);
  });
});

describe("the cutter", () => {
  test("segments of 2 s split into parts within the part target, each beginning with an independent part", () => {
    const { windows } = cut(media, 7919);
    const last = windows.at(-1)!;
    expect(last.ended).toBe(true);
    const complete = last.segments.filter((s) => s.complete);
    expect(complete.length).toBe(11);
    // The first and last segments are left out: the encoder stretches the first frame, and the stream ends mid-segment.
    for (const segment of complete.slice(1, -1)) {
      expect(segment.duration).toBeCloseTo(2, 2);
      expect(segment.parts[0]!.independent).toBe(true);
      expect(segment.parts.slice(1).every((p) => !p.independent)).toBe(true);
      for (const part of segment.parts) expect(part.duration).toBeLessThanOrEqual(0.33334);
      // Parts of whole frames (40 ms) close to the target: 0.32 s, and the rest at the segment's end.
      expect(segment.parts.length).toBe(7);
    }
    // Program date times follow the media clock from the anchor.
    expect(complete[2]!.programDateTime - complete[1]!.programDateTime).toBe(2000);
  });

  test("parts hold every byte of every fragment, whatever sizes the stream arrives in", () => {
    const small = cut(media, 1000);
    const large = cut(media, 65536);
    const total = (c: Cut) => [...c.parts.values()].flat().reduce((sum, b) => sum + b.length, 0) + c.init!.length;
    // Everything but the index ffmpeg appends when the file ends (mfra), which a live stream never gets to.
    const mfra = media.lastIndexOf("mfra", media.length, "latin1") - 4;
    expect(total(small)).toBe(mfra);
    expect(total(large)).toBe(mfra);
    expect([...small.parts.keys()]).toEqual([...large.parts.keys()]);
    // Each part's chunks are whole moof+mdat pairs whose video starts where the playlist says.
    const tracks = parseMoov(small.init!.subarray(small.init!.indexOf("moov", 0, "latin1") - 4));
    const first = Buffer.concat(small.parts.get("1.0")!);
    const video = parseMoof(first.subarray(0, first.readUInt32BE(0)), tracks).find(
      (r) => tracks.find((t) => t.id === r.trackId)!.handler === "vide",
    );
    expect(video?.startsWithSync).toBe(true);
  });

  test("the preload hint names the part the next bytes go into, and every hinted part comes", () => {
    const hinted = new Set<string>();
    const written = new Set<string>();
    const cutter = new Cutter(
      { partTargetS: 0.33334, segmentS: 2, keyframeS: 2, windowSegments: 10 },
      {
        init: () => {},
        chunk: (msn, part) => written.add(`${msn}.${part}`),
        part: (window) => hinted.add(`${window.next.msn}.${window.next.part}`),
      },
    );
    cutter.push(media);
    // The first segment's end is not foreseen (the keyframe schedule is learnt from the second keyframe), but
    // nothing is announced before it is complete, so no player is ever told of a part that does not come.
    expect([...hinted].filter((part) => !written.has(part))).toEqual([]);
    expect([...hinted].some((part) => part.startsWith("0."))).toBe(false);
    expect(written.size).toBeGreaterThan(70);
  });

  /** The windows announced when fragments (a frame each) arrive as `arrival(n)` says for the n-th, in ms. */
  function announced(arrival: (fragment: number) => number): RenditionWindow[] {
    const windows: RenditionWindow[] = [];
    let fragments = 0;
    const cutter = new Cutter(
      { partTargetS: 0.33334, segmentS: 2, keyframeS: 2, windowSegments: 10, now: () => arrival(fragments) },
      { init: () => {}, chunk: () => {}, part: (window) => windows.push(window) },
    );
    for (const box of new BoxSplitter().push(media)) {
      if (box.type === "moof") fragments++;
      cutter.push(box.bytes);
    }
    return windows;
  }

  test("the first window announced holds a whole segment, dated by the frame that came soonest", () => {
    // A frame every 40 ms from 1000 s on, each 40 ms after its end: media time zero is at 1000 s (+ 40 ms).
    const windows = announced((n) => 1_000_000 + 40 * n + 40);
    const first = windows[0]!;
    expect(first.next).toEqual({ msn: 1, part: 0 });
    expect(first.segments.map((s) => s.complete)).toEqual([true]);
    expect(Math.abs(first.segments[0]!.programDateTime - 1_000_000)).toBeLessThanOrEqual(40);
    expect(windows.at(-1)!.segments[1]!.programDateTime - first.segments[0]!.programDateTime).toBeCloseTo(
      first.segments[0]!.duration * 1000,
      -1,
    );
  });

  test("a first segment that came in a burst does not date the stream: the next one, at the media's pace, does", () => {
    // The first twenty frames at once (a backlog at start-up), then one every 40 ms, 40 ms after the frame's end.
    const windows = announced((n) => 1_000_000 + 40 * Math.max(n, 20) + 40);
    const first = windows[0]!;
    expect(first.next).toEqual({ msn: 2, part: 0 });
    expect(Math.abs(first.segments[0]!.programDateTime - 1_000_000)).toBeLessThanOrEqual(40);
    expect(first.segments[1]!.programDateTime - first.segments[0]!.programDateTime).toBeCloseTo(
      first.segments[0]!.duration * 1000,
      -1,
    );
    // A source that never keeps the media's pace (here: all at once) is announced after three segments all the same.
    expect(announced(() => 1_000_000)[0]!.next).toEqual({ msn: 3, part: 0 });
  });

  test("a stream joined mid-way starts at its first keyframe: what comes before is dropped", () => {
    // The init segment, then fragments from the middle of the first 2 s on, as a pull from a media server may begin.
    const boxes = new BoxSplitter().push(media);
    const moov = boxes.findIndex((b) => b.type === "moov");
    const joined = Buffer.concat([...boxes.slice(0, moov + 1), ...boxes.slice(moov + 1 + 2 * 10)].map((b) => b.bytes));
    const { windows } = cut(joined, 4096);
    const first = windows.at(-1)!.segments[0]!;
    expect(first.parts[0]!.independent).toBe(true);
    expect(checkPlaylist(parsePlaylist(mediaPlaylist(windows.at(-1)!, { skip: false, reports: [] })))).toEqual([]);
    // The ten frames before the keyframe at 2 s are gone, and with them the first segment.
    expect(windows.at(-1)!.segments.reduce((sum, s) => sum + s.duration, 0)).toBeCloseTo(21 - 2.02, 1);
  });

  for (const every of [1, 2]) {
    test(`with a keyframe every ${every === 1 ? "part" : "other part"}, segments still last 2 s and those parts are independent`, () => {
      const bytes = keyframedEvery.get(every)!;
      const keyframeS = (8 * every) / 25;
      // Whole, in odd-sized chunks, and joined mid-way between segment keyframes (at the second part keyframe).
      const boxes = new BoxSplitter().push(bytes);
      const moov = boxes.findIndex((b) => b.type === "moov");
      const joined = Buffer.concat(
        [...boxes.slice(0, moov + 1), ...boxes.slice(moov + 1 + 2 * 16 * every)].map((b) => b.bytes),
      );
      for (const [input, chunk] of [
        [bytes, 7919],
        [joined, 4096],
      ] as const) {
        const { windows, parts, init } = cut(input, chunk, keyframeS);
        const last = windows.at(-1)!;
        const complete = last.segments.filter((s) => s.complete);
        expect(complete.length).toBeGreaterThanOrEqual(10);
        for (const segment of complete.slice(1, -1)) {
          expect(segment.duration).toBeCloseTo(2, 2);
          expect(segment.parts.length).toBe(7);
          expect(segment.parts.map((p) => p.independent)).toEqual(
            Array.from({ length: 7 }, (_, index) => index % every === 0),
          );
        }
        // Every part the playlist calls independent starts on a keyframe, and every part that does is called so.
        const tracks = parseMoov(init!.subarray(init!.indexOf("moov", 0, "latin1") - 4));
        for (const segment of last.segments) {
          segment.parts.forEach((part, index) => {
            const first = Buffer.concat(parts.get(`${segment.msn}.${index}`)!);
            const video = parseMoof(first.subarray(0, first.readUInt32BE(0)), tracks).find(
              (r) => tracks.find((t) => t.id === r.trackId)!.handler === "vide",
            );
            expect(video?.startsWithSync, `${segment.msn}.${index}`).toBe(part.independent);
          });
        }
        expect(checkPlaylist(parsePlaylist(mediaPlaylist(last, { skip: false, reports: [] })))).toEqual([]);
      }
    });
  }

  test("audio-only streams make parts that are all independent", () => {
    const { windows } = cut(audioOnly, 5000);
    const segments = windows.at(-1)!.segments.filter((s) => s.complete);
    expect(segments.length).toBeGreaterThanOrEqual(3);
    for (const part of segments.flatMap((s) => s.parts)) {
      expect(part.independent).toBe(true);
      expect(part.duration).toBeLessThanOrEqual(0.33334);
    }
  });
});

describe("playlists", () => {
  test("every playlist along the stream keeps the RFC's rules, and delta updates equal the full ones", () => {
    const { windows } = cut(media, 3000);
    const history = new ReloadHistory();
    let deltas = 0;
    for (const [index, window] of windows.entries()) {
      const full = parsePlaylist(mediaPlaylist(window, { skip: false, reports: [] }));
      history.add(full, `playlist ${index}`);
      const delta = parsePlaylist(mediaPlaylist(window, { skip: true, reports: [] }));
      if (delta.skipped > 0) {
        deltas++;
        expect(deltaMatches(full, delta)).toEqual([]);
      }
    }
    expect(history.problems).toEqual([]);
    expect(deltas).toBeGreaterThan(10);
    const last = parsePlaylist(mediaPlaylist(windows.at(-1)!, { skip: false, reports: [] }));
    expect(last.ended).toBe(true);
    expect(last.preloadHint).toBeUndefined();
  });

  test("no part is listed as ending after its media: durations are rounded down", () => {
    // A stretched first frame leaves durations off the 40 ms grid: 3858 ticks of 12800 is 0.30140625 s.
    const parts = [0.30140625, 0.32, 0.32, 0.32, 0.32, 0.32, 0.1].map((duration, index) => ({
      duration,
      independent: index === 0,
    }));
    const duration = parts.reduce((sum, p) => sum + p.duration, 0);
    const window: RenditionWindow = {
      partTarget: 0.333,
      targetDuration: 2,
      segments: [{ msn: 0, programDateTime: Date.UTC(2026, 0, 1), duration, parts, complete: true }],
      next: { msn: 1, part: 0 },
      ended: false,
    };
    const listed = parsePlaylist(mediaPlaylist(window, { skip: false, reports: [] })).segments[0]!;
    let end = 0;
    let listedEnd = 0;
    for (const [index, part] of listed.parts.entries()) {
      end += parts[index]!.duration;
      listedEnd += part.duration;
      expect(listedEnd).toBeLessThanOrEqual(end);
      expect(end - listedEnd).toBeLessThan(0.0001);
    }
    expect(listed.duration).toBeLessThanOrEqual(duration);
  });

  test("the checker catches the faults it is there for", () => {
    const { windows } = cut(media, 3000);
    const text = mediaPlaylist(windows[40]!, { skip: false, reports: [] });
    expect(checkPlaylist(parsePlaylist(text))).toEqual([]);
    expect(checkPlaylist(parsePlaylist(text.replace(/INDEPENDENT=YES/g, "")))).toContainEqual(
      expect.stringContaining("INDEPENDENT"),
    );
    const lastInf = text.lastIndexOf("#EXTINF:");
    const stretched = `${text.slice(0, lastInf)}#EXTINF:2.5,${text.slice(text.indexOf("\n", lastInf))}`;
    expect(checkPlaylist(parsePlaylist(stretched))).toContainEqual(expect.stringContaining("add up"));
    const history = new ReloadHistory();
    history.add(parsePlaylist(text), "a");
    history.add(parsePlaylist(text.replace("PART-TARGET=0.33334", "PART-TARGET=0.5")), "b");
    expect(history.problems).toContainEqual(expect.stringContaining("PART-TARGET changed"));
  });

  test("blocking reloads wait for parts ahead, and refuse what is too far ahead", () => {
    const { windows } = cut(media, 3000);
    const window = windows[20]!;
    const { next } = window;
    expect(blockingAnswer(window, next.msn, Math.max(0, next.part - 1))).toBe(next.part > 0 ? "ready" : "wait");
    expect(blockingAnswer(window, next.msn - 1, undefined)).toBe("ready");
    expect(blockingAnswer(window, next.msn, next.part)).toBe("wait");
    // Two segments past the last one listed may be waited for, a third is refused.
    const last = window.segments.at(-1)!.msn;
    expect(blockingAnswer(window, last + 2, 0)).toBe("wait");
    expect(blockingAnswer(window, last + 3, 0)).toBe("too_far");
    expect(blockingAnswer(window, next.msn, next.part + 4)).toBe("too_far");
    expect(parseDirectives({ _HLS_part: "1" })).toBe("_HLS_part needs _HLS_msn");
    expect(parseDirectives({ _HLS_msn: "x" })).toBe("_HLS_msn must be a whole number");
    expect(parseDirectives({ _HLS_msn: "4", _HLS_part: "2", _HLS_skip: "YES" })).toEqual({
      msn: 4,
      part: 2,
      skip: true,
    });
  });
});
