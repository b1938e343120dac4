/**
 * The floor of the LL-HLS viewers benchmark: a bare Bun server that does only what the
 * players' requests cannot do without. It makes a part every `partMs` (fixed bytes, as many
 * as a part of the watched stream) and rings a doorbell like the recorder's, holds every
 * blocking reload until its part exists and then answers them all with one prepared
 * playlist, and answers a part request at once. No Redis read, no window, no pipeline: the
 * same viewer processes against it measure what 500 answers to the same 500 sockets cost
 * on this machine, in the same run as Parley's origin.
 *
 *   bun test/bench/llhls/floor.ts <redis url> <channel> <rendition> <part ms> <part bytes> <playlist bytes>
 *
 * Prints its port as its first line, then runs until killed.
 */
import { Redis } from "ioredis";

const [redisUrl, channel, rendition, partMsText, partBytesText, playlistBytesText] = process.argv.slice(2) as [
  string,
  string,
  string,
  string,
  string,
  string,
];
const PARTS_PER_SEGMENT = 6;
const part = Buffer.alloc(Number(partBytesText), 1);
const bells = new Redis(redisUrl);
const headers = { "access-control-allow-origin": "*" };

let next = { msn: 10, part: 0 };
/** The blocking reloads waiting for each part, by `<msn>.<part>`. */
const waiting = new Map<string, ((playlist: Buffer) => void)[]>();
let playlist = playlistFor(next);

/** A playlist as long as the watched one, ending in the preload hint of the part to come. */
function playlistFor(hint: { msn: number; part: number }): Buffer {
  const tail = `#EXT-X-PRELOAD-HINT:TYPE=PART,URI="${hint.msn}.${hint.part}.m4s"\n`;
  const head = "#EXTM3U\n#EXT-X-VERSION:9\n";
  const filler = "#".repeat(Math.max(0, Number(playlistBytesText) - head.length - tail.length - 1));
  return Buffer.from(`${head}${filler}\n${tail}`);
}

const after = (at: { msn: number; part: number }) =>
  at.part + 1 < PARTS_PER_SEGMENT ? { msn: at.msn, part: at.part + 1 } : { msn: at.msn + 1, part: 0 };
const holds = (msn: number, partIndex: number) => msn < next.msn || (msn === next.msn && partIndex < next.part);

setInterval(async () => {
  const closed = `${next.msn}.${next.part}`;
  next = after(next);
  playlist = playlistFor(next);
  // Rung before the answers, as the recorder's doorbell is heard before the origin can answer.
  await bells.publish(channel, `${rendition} w`);
  const answers = waiting.get(closed) ?? [];
  waiting.delete(closed);
  for (const answer of answers) answer(playlist);
  await bells.publish(channel, `${rendition} ${next.msn}.${next.part} 0`);
}, Number(partMsText));
await bells.publish(channel, `${rendition} ${next.msn}.${next.part} 0`);

const server = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch(request) {
    const url = new URL(request.url);
    if (url.pathname.endsWith(".m3u8") && !url.pathname.includes(`/${rendition}/`))
      return new Response(`#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=128000\nlive/${rendition}/index.m3u8?viewer=x\n`);
    if (url.pathname.endsWith("index.m3u8")) {
      const msn = Number(url.searchParams.get("_HLS_msn") ?? -1);
      const partIndex = Number(url.searchParams.get("_HLS_part") ?? 0);
      const answer = (body: Buffer) =>
        new Response(body as Uint8Array<ArrayBuffer>, {
          headers: { ...headers, "content-type": "application/vnd.apple.mpegurl", "cache-control": "no-store" },
        });
      if (msn < 0 || holds(msn, partIndex)) return answer(playlist);
      const key = `${msn}.${partIndex}`;
      return new Promise<Response>((resolve) => {
        const list = waiting.get(key) ?? [];
        list.push((body) => resolve(answer(body)));
        waiting.set(key, list);
      });
    }
    return new Response(part as Uint8Array<ArrayBuffer>, {
      headers: { ...headers, "content-type": "video/mp4", "cache-control": "public, max-age=31536000, immutable" },
    });
  },
});
console.log(server.port);
