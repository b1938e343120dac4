/**
 * hls.js (the npm package, unmodified) in a real Chromium, playing an LL-HLS address with
 * `lowLatencyMode: true`, from a page served on loopback. The page keeps what the test and
 * the latency benchmark read: hls.js's own view of the playlist (block reloads, part target,
 * low-latency mode), the parts and segments it loaded, and the video's clock.
 */
import { readFileSync } from "node:fs";
import type { Page } from "playwright-core";
import type { Chromium } from "./browser";
import { until } from "./wait";

const HLS_JS = readFileSync(Bun.resolveSync("hls.js/dist/hls.min.js", import.meta.dir), "utf8");

const PAGE = `<!doctype html><html><head><title>LL-HLS player</title></head><body>
<video id="video" muted playsinline autoplay></video>
<script src="/hls.js"></script>
<script>
  const stats = { parts: 0, fragments: 0, errors: [], stalls: [], canBlockReload: false, partTarget: 0 };
  window.stats = stats;
  // Allowed to play up to 1.5x to reach its target latency when it
  // starts behind or falls behind (hls.js plays at 1x only by default).
  const hls = new Hls({ lowLatencyMode: true, maxLiveSyncPlaybackRate: 1.5 });
  window.hls = hls;
  hls.on(Hls.Events.FRAG_LOADED, (_, data) => { if (data.part) stats.parts++; else stats.fragments++; });
  hls.on(Hls.Events.ERROR, (_, data) => {
    stats.errors.push(data.details + (data.fatal ? " (fatal)" : ""));
    // Where a stall happened: seconds since the page opened, the video clock, what was buffered ahead.
    if (data.details === "bufferStalledError") {
      stats.stalls.push({ after: performance.now() / 1000, at: video.currentTime, buffered: data.buffer });
    }
  });
  hls.on(Hls.Events.LEVEL_UPDATED, (_, data) => {
    stats.canBlockReload = data.details.canBlockReload;
    stats.partTarget = data.details.partTarget;
  });
  const video = document.getElementById("video");
  hls.attachMedia(video);
  hls.loadSource(new URLSearchParams(location.search).get("src"));
  video.play().catch(() => {});
</script></body></html>`;

export interface PlayerState {
  currentTime: number;
  /** Wall clock minus the program date time of the frame on screen, ms (null before hls.js knows it). */
  latencyMs: number | null;
  lowLatencyMode: boolean;
  /** The latency hls.js aims for: PART-HOLD-BACK, raised by a second after each stall. */
  targetLatency: number | null;
  playbackRate: number;
  canBlockReload: boolean;
  partTarget: number;
  parts: number;
  fragments: number;
  errors: string[];
  stalls: { after: number; at: number; buffered: number }[];
}

export interface Player {
  page: Page;
  state(): Promise<PlayerState>;
  close(): Promise<void>;
}

/**
 * Opens the player page on `src` once the stream is there (as a page would once told that the
 * stream is live: hls.js gives up on a multivariant playlist after one retry); the page and
 * hls.js come from a loopback server of its own.
 */
export async function openPlayer(chromium: Chromium, src: string): Promise<Player> {
  await until(() => fetch(src).then((r) => r.arrayBuffer().then(() => r.ok)), Boolean, 30_000, 100);
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch(request) {
      const path = new URL(request.url).pathname;
      if (path === "/hls.js") return new Response(HLS_JS, { headers: { "content-type": "text/javascript" } });
      return new Response(PAGE, { headers: { "content-type": "text/html" } });
    },
  });
  const context = await chromium.context();
  const page = await context.newPage();
  await page.goto(`http://127.0.0.1:${server.port}/?src=${encodeURIComponent(src)}`);
  return {
    page,
    state: () =>
      page.evaluate(() => {
        const w = window as unknown as {
          hls: { playingDate: Date | null; lowLatencyMode: boolean; targetLatency: number | null };
          stats: Omit<PlayerState, "currentTime" | "latencyMs" | "lowLatencyMode" | "targetLatency" | "playbackRate">;
        };
        const video = document.getElementById("video") as HTMLVideoElement;
        const date = w.hls.playingDate;
        return {
          ...w.stats,
          currentTime: video.currentTime,
          latencyMs: date ? Date.now() - date.getTime() : null,
          lowLatencyMode: w.hls.lowLatencyMode,
          targetLatency: w.hls.targetLatency,
          playbackRate: video.playbackRate,
        };
      }),
    async close() {
      await context.close();
      server.stop(true);
    },
  };
}
