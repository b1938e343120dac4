/**
 * The LL-HLS origin's waiting, on a stream written straight into Redis as the recorder writes
 * it (no ffmpeg): many blocking reloads of one part all answered when its doorbell rings,
 * one answered by the origin's own poll when the doorbell is lost, a plain reload that reads
 * the window again when no doorbell has rung for a while, and one whose part never comes
 * refused with 503 after three target durations.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createApp } from "../../src/process/app";
import { llhlsKeys } from "../../src/modules/streaming/llhls/publisher";
import { stopLlhlsOrigin } from "../../src/modules/streaming/llhls/origin";
import { stopViewerSweeps } from "../../src/modules/streaming/llhls/viewers";
import type { RenditionWindow } from "../../src/modules/streaming/llhls/window";
import { closeClient, createRedis, redisKey } from "../../src/queue/connection";
import { until } from "../support/wait";

const redis = createRedis("llhls-origin-test");
const api = createApp().listen({ hostname: "127.0.0.1", port: 0 });
const base = `http://127.0.0.1:${api.server!.port}/llhls/v1/live`;
const PARTS = Array.from({ length: 6 }, () => ({ duration: 0.33333, independent: true }));

/** A stream whose window ends with `next` as the part being written; 1 s target duration. */
async function writeWindow(stream: string, next: { msn: number; part: number }, ended = false): Promise<void> {
  const window: RenditionWindow = {
    partTarget: 0.33334,
    targetDuration: 1,
    ended,
    next,
    segments: [1, 2, next.msn].map((msn) => ({
      msn,
      programDateTime: Date.UTC(2026, 0, 1) + msn * 2000,
      duration: msn === next.msn ? next.part / 3 : 2,
      parts: msn === next.msn ? PARTS.slice(0, next.part) : PARTS,
      complete: msn !== next.msn,
    })),
  };
  await redis.set(llhlsKeys.window(stream, "v0"), JSON.stringify(window), "EX", 60);
}

async function startStream(stream: string): Promise<void> {
  await redis.set(llhlsKeys.renditions(stream), JSON.stringify([{ name: "v0", bandwidth: 128_000 }]), "EX", 60);
  await writeWindow(stream, { msn: 3, part: 2 });
  // The origin learns of the stream on its first request.
  expect((await fetch(`${base}/${stream}/v0/index.m3u8`)).status).toBe(200);
}

const reload = (stream: string, msn: number, part: number) =>
  fetch(`${base}/${stream}/v0/index.m3u8?_HLS_msn=${msn}&_HLS_part=${part}`);

beforeAll(() => redis.ping());
afterAll(async () => {
  await api.stop(true);
  stopViewerSweeps();
  await Promise.all([stopLlhlsOrigin(), closeClient(redis)]);
});

describe("the LL-HLS origin's blocking reloads", () => {
  test("many reloads of one part wait for it and are all answered when its doorbell rings", async () => {
    const stream = "origin-doorbell";
    await startStream(stream);
    const reloads = Array.from({ length: 50 }, () =>
      reload(stream, 3, 2).then(async (response) => ({
        status: response.status,
        // Only a reload that was held for its part says how long after the part it was answered.
        waited: response.headers.has("server-timing"),
        text: await response.text(),
      })),
    );
    // Until the reloads are at the server (held for the part, they stay in flight): on a busy machine
    // the part could otherwise come before any of them had been read, and none would wait.
    for (let waited = 0; api.server!.pendingRequests < reloads.length && waited < 5_000; waited += 10)
      await Bun.sleep(10);
    await writeWindow(stream, { msn: 3, part: 3 });
    await redis.publish(redisKey(llhlsKeys.doorbell(stream)), "v0 w");
    const answers = await Promise.all(reloads);
    expect(answers.map((a) => a.status)).toEqual(answers.map(() => 200));
    for (const { text } of answers) expect(text).toContain('#EXT-X-PRELOAD-HINT:TYPE=PART,URI="3.3.m4s"');
    // Those that reached the origin's wait before the doorbell were held; some may still have been reading the window.
    expect(answers.some((a) => a.waited)).toBe(true);
  });

  test("a reload whose doorbell is lost is answered by the origin's own look at Redis", async () => {
    const stream = "origin-no-doorbell";
    await startStream(stream);
    const waiting = reload(stream, 3, 2);
    await writeWindow(stream, { msn: 3, part: 3 });
    const started = performance.now();
    const response = await waiting;
    expect(response.status).toBe(200);
    // Without a doorbell the origin keeps its window until it looks itself, so the reload was held either way.
    expect(response.headers.get("server-timing")).toStartWith("part;dur=");
    expect(await response.text()).toContain('URI="3.3.m4s"');
    // The origin reads the window every half second while anyone waits; three target durations is the ceiling.
    expect(performance.now() - started).toBeLessThan(3_000);
  });

  test("a plain reload after a lost doorbell reads the window again: the stream's end is not missed", async () => {
    const stream = "origin-ended-quietly";
    await startStream(stream);
    await writeWindow(stream, { msn: 3, part: 2 }, true);
    // No doorbell rings; a plain reload answers from memory until the window is older than the origin's poll.
    const ended = await until(
      () => fetch(`${base}/${stream}/v0/index.m3u8`).then((r) => r.text()),
      (text) => text.includes("#EXT-X-ENDLIST"),
      3_000,
    );
    expect(ended).toContain("#EXT-X-ENDLIST");
    expect(ended).not.toContain("#EXT-X-PRELOAD-HINT");
  });

  test("a part that does not come within three target durations is a 503 in the error shape", async () => {
    const stream = "origin-stalled";
    await startStream(stream);
    const started = performance.now();
    const response = await reload(stream, 3, 2);
    const waited = performance.now() - started;
    expect(response.status).toBe(503);
    expect(response.headers.get("retry-after")).toBeTruthy();
    expect(response.headers.get("x-request-id")).toBeTruthy();
    expect((await response.json()).error.code).toBe("dependency_down");
    expect(waited).toBeGreaterThanOrEqual(2_900);
  });
});
