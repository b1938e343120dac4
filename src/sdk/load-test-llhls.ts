/**
 * `parley load-test`'s llhls part: blocking LL-HLS viewers of a live stream named by --stream,
 * or of one started for the run by --start-stream and stopped after it. Apart because it is
 * the one part that reads playlists rather than the API.
 */
import type { Parley } from "./client.js";
import type { LoadTestOptions } from "./load-test-options.js";
import { message, sleep, type Tally } from "./load-test-tally.js";

/** The live stream's multivariant playlist: the one named, or one started for the run and stopped after it. */
async function liveStream(
  base: string,
  parley: Parley,
  id: string,
  options: LoadTestOptions,
  cleanups: Array<() => Promise<void>>,
): Promise<{ master: URL } | { skipped: string }> {
  if (options.stream) {
    const named = /^https?:\/\//.test(options.stream)
      ? options.stream
      : `${base}/llhls/v1/live/${encodeURIComponent(options.stream)}.m3u8`;
    return { master: new URL(named) };
  }
  if (!options.startStream)
    return { skipped: "no live stream: name one with --stream, or start one with --start-stream (docs/cli.md)" };
  const room = `loadtest-${id}`;
  let started: { low_latency_hls_url?: string };
  try {
    started = (await parley.streaming.start({ room_name: room, is_low_latency: true })) as typeof started;
  } catch (error) {
    return { skipped: `Parley did not start a stream: ${message(error)}` };
  }
  cleanups.push(async () => {
    await parley.streaming.stop(room);
  });
  if (!started.low_latency_hls_url) return { skipped: "the stream started has no low-latency playlist" };
  const master = new URL(started.low_latency_hls_url);
  // The recorder needs a few seconds to publish its first parts: the load waits for them.
  const deadline = performance.now() + 30_000;
  while (performance.now() < deadline) {
    const answer = await fetch(master).catch(() => undefined);
    if (answer?.ok) {
      const variant = (await answer.text()).split("\n").find((line) => line.includes(".m3u8"));
      const media = variant ? await fetch(new URL(variant, master)).catch(() => undefined) : undefined;
      if (media?.ok && (await media.text()).includes("#EXT-X-PRELOAD-HINT")) return { master };
    } else await answer?.arrayBuffer();
    await sleep(250);
  }
  return { skipped: `the stream ${room} did not go live within 30 s (a recorder and media server must be running)` };
}

/** Blocking-reload viewers: each asks for the next part as an LL-HLS player does, and fetches it. */
export async function setUpLlhls(
  base: string,
  parley: Parley,
  id: string,
  options: LoadTestOptions,
  tally: Tally,
  cleanups: Array<() => Promise<void>>,
) {
  if (options.viewers <= 0) return tally.skip("--viewers 0");
  const stream = await liveStream(base, parley, id, options, cleanups);
  if ("skipped" in stream) return tally.skip(stream.skipped);
  const { master } = stream;
  const answer = await fetch(master).catch((error: unknown) => error as Error);
  if (answer instanceof Error || !answer.ok)
    return tally.skip(`${master} is not live (${answer instanceof Error ? answer.message : answer.status})`);
  const variant = (await answer.text()).split("\n").find((line) => line.trim() !== "" && !line.startsWith("#"));
  if (!variant) return tally.skip(`${master} lists no variant`, "failed");
  const media = new URL(variant.trim(), master);
  const viewer = async (running: () => boolean) => {
    // The playlist's own query (the viewer id it hands out) is kept beside the blocking reload's.
    let blocking: Record<string, string> = {};
    let waited: URL | undefined;
    while (running()) {
      const asked = new URL(media);
      for (const [name, value] of Object.entries(blocking)) asked.searchParams.set(name, value);
      const playlist = await fetch(asked).catch((error: unknown) => error as Error);
      if (playlist instanceof Error || !playlist.ok) {
        tally.fail(
          playlist instanceof Error
            ? playlist.message
            : `playlist ${playlist.status} ${(await playlist.text()).slice(0, 200)}`,
        );
        await sleep(1000);
        blocking = {};
        waited = undefined;
        continue;
      }
      const text = await playlist.text();
      // The reload was held until the hinted part existed: fetching it now times its delivery alone.
      if (waited) {
        const startedAt = performance.now();
        const part = await fetch(waited).catch((error: unknown) => error as Error);
        if (part instanceof Error || !part.ok) tally.fail(part instanceof Error ? part.message : `part ${part.status}`);
        else {
          await part.arrayBuffer();
          tally.ok(startedAt);
        }
      }
      const lines = text.split("\n");
      const sequence = Number(/^#EXT-X-MEDIA-SEQUENCE:(\d+)/m.exec(text)?.[1] ?? 0);
      const isUri = (line: string) => line.trim() !== "" && !line.startsWith("#");
      const lastSegment = lines.findLastIndex(isUri);
      const partsSince = lines.slice(lastSegment + 1).filter((line) => line.startsWith("#EXT-X-PART:")).length;
      const hint = /#EXT-X-PRELOAD-HINT:.*URI="([^"]+)"/.exec(text)?.[1];
      if (!hint) {
        tally.fail("the media playlist has no preload hint");
        await sleep(1000);
        blocking = {};
        waited = undefined;
        continue;
      }
      waited = new URL(hint, media);
      blocking = { _HLS_msn: String(sequence + lines.filter(isUri).length), _HLS_part: String(partsSince) };
    }
  };
  return {
    run: (running: () => boolean) => Promise.all(Array.from({ length: options.viewers }, () => viewer(running))),
  };
}
