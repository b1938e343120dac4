// parallel-test: alone (real-time media: ffmpeg encodes live, Chromium decodes and plays at the wall clock's pace)
/**
 * A real LL-HLS player: hls.js in Chromium with lowLatencyMode plays a live low-latency
 * stream from Parley's origin, in low-latency mode (blocking reloads, parts), and keeps up.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { type Chromium, startChromium } from "../support/browser";
import { type LlhlsStack, startLlhlsStack } from "../support/llhls-stack";
import { openPlayer } from "../support/llhls-player";
import { until } from "../support/wait";

let stack: LlhlsStack;
let chromium: Chromium;
beforeAll(async () => {
  [stack, chromium] = await Promise.all([startLlhlsStack(), startChromium()]);
});
afterAll(async () => {
  await chromium?.close();
  await stack?.close();
});

test("hls.js in Chromium plays the stream in low-latency mode, loading parts, seconds behind the source", async () => {
  const started = await stack.start({ room_name: "llhls-player", is_low_latency: true });
  expect(started.status).toBe(200);
  const player = await openPlayer(chromium, started.body.low_latency_hls_url);
  try {
    const playing = await until(player.state, (s) => s.currentTime > 1, 30_000, 200);
    expect(playing.currentTime).toBeGreaterThan(1);
    // The video clock keeps advancing: the player is fed as the stream goes.
    // Eight seconds of it: long enough for hls.js to catch up (at up to 1.5x) on a start that left it behind.
    const later = await until(player.state, (s) => s.currentTime > playing.currentTime + 8, 30_000, 200);
    expect(later.currentTime).toBeGreaterThan(playing.currentTime + 8);
    expect(later.lowLatencyMode).toBe(true);
    expect(later.canBlockReload).toBe(true);
    expect(later.partTarget).toBeCloseTo(0.333, 3);
    expect(later.parts).toBeGreaterThan(10);
    expect(later.errors.filter((e) => e.includes("fatal"))).toEqual([]);
    // Glass to player, by the program date time of the frame on screen: a sanity bound that a player in
    // plain live mode (three target durations back, and more) would miss; test/bench/llhls.bench.ts measures it.
    // A player that fell behind at the start catches up at up to 1.5x; it gets ten more seconds to do so.
    const caughtUp = await until(player.state, (s) => s.latencyMs !== null && s.latencyMs < 6_000, 10_000, 200);
    console.log(
      `hls.js: ${caughtUp.parts} parts, ${caughtUp.fragments} segments, latency ${caughtUp.latencyMs} ms, ` +
        `stalls ${JSON.stringify(caughtUp.stalls)}`,
    );
    expect(caughtUp.latencyMs).not.toBeNull();
    expect(caughtUp.latencyMs!).toBeLessThan(6_000);
  } finally {
    await player.close();
    await stack.stop("llhls-player");
  }
}, 90_000);
