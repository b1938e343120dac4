/**
 * LL-HLS for a recorder that only publishes RTMP (the command driver): the worker pulls the
 * published stream back from the media server and Parley serves it, read here through a
 * second API process (`--role=api`), as a viewer behind a load balancer may be.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { commandDriver } from "../../workers/recorder/command";
import { type ApiProcess, startApiProcess } from "../support/api-process";
import { type LlhlsStack, startLlhlsStack } from "../support/llhls-stack";
import { parsePlaylist, ReloadHistory } from "../support/llhls-validator";
import { until } from "../support/wait";

// A stand-in for an operator's recorder: publishes a test pattern
// with a keyframe every 2 s, says ready, ends on SIGTERM.
const RECORDER = [
  "ffmpeg -hide_banner -nostdin -loglevel error -re -f lavfi -i testsrc2=size=640x360:rate=25",
  "-re -f lavfi -i sine=frequency=440:sample_rate=48000",
  "-map 0:v -map 1:a -c:v libx264 -preset ultrafast -tune zerolatency " +
    "-force_key_frames 'expr:gte(t,n_forced*2)' -sc_threshold 0",
  '-c:a aac -b:a 64k -f flv "$PARLEY_RTMP_URL" & trap "kill $!" TERM; sleep 0.5; echo ready; wait',
].join(" ");

let stack: LlhlsStack;
let other: ApiProcess;
beforeAll(async () => {
  [stack, other] = await Promise.all([
    startLlhlsStack(commandDriver(RECORDER)),
    startApiProcess({ DATA_DIR: mkdtempSync(join(tmpdir(), "parley-llhls-api-")), API_PROCESSES: "1" }),
  ]);
});
afterAll(async () => {
  other?.child.kill("SIGTERM");
  await other?.child.exited;
  await stack?.close();
});

test("a command recorder's RTMP is pulled back and served as LL-HLS, by another API process too", async () => {
  const started = await stack.start({ room_name: "llhls-command", is_low_latency: true });
  expect(started.status).toBe(200);
  const url = started.body.low_latency_hls_url.replace(stack.base, other.http);
  const master = await until(
    () => fetch(url).then((r) => (r.ok ? r.text() : "")),
    (text) => text.includes("index.m3u8"),
    20_000,
  );
  const variant = new URL(master.split("\n").find((l) => l.includes("index.m3u8"))!, url);
  variant.search = "";
  const history = new ReloadHistory();
  let playlist = parsePlaylist(
    await until(
      () => fetch(variant).then((r) => r.text()),
      (text) => text.includes("#EXT-X-PART:"),
      20_000,
    ),
  );
  // Followed part by part until the segment it began in and the two after it are whole (at most 6 s of stream
  // at a keyframe every 2 s); the ceiling is for a machine running two suites.
  const followedFrom = Number(playlist.preloadHint!.split(".")[0]);
  const lastWhole = () => playlist.segments.filter((s) => s.uri).at(-1)?.msn ?? -1;
  const end = Date.now() + 30_000;
  while (lastWhole() < followedFrom + 2 && Date.now() < end) {
    const [msn, part] = playlist.preloadHint!.replace(/\.m4s$/, "").split(".");
    const response = await fetch(`${variant.href}?_HLS_msn=${msn}&_HLS_part=${part}`);
    expect(response.status).toBe(200);
    playlist = parsePlaylist(await response.text());
    history.add(playlist, `reload ${history.reloads}`);
  }
  // The pull copies what the recorder encodes: its keyframe every 2 s starts each segment.
  expect(history.problems).toEqual([]);
  expect(history.completeSegments()).toBeGreaterThanOrEqual(3);
  expect(lastWhole()).toBeGreaterThanOrEqual(followedFrom + 2);
  const whole = playlist.segments.filter((s) => s.uri).at(-1)!;
  const bytes = await fetch(new URL(whole.uri!, variant)).then((r) => r.arrayBuffer());
  expect(bytes.byteLength).toBeGreaterThan(1000);
  expect((await stack.stop("llhls-command")).status).toBe(200);
  const ended = await until(
    () => fetch(variant).then((r) => r.text()),
    (text) => text.includes("#EXT-X-ENDLIST"),
    10_000,
  );
  expect(ended).toContain("#EXT-X-ENDLIST");
}, 90_000);
