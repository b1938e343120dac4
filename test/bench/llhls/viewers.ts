/**
 * One process of LL-HLS benchmark viewers: `count` players against `master` for `seconds`,
 * each making a blocking reload on the preload hint and then fetching that part. It hears
 * the stream's doorbell itself (Redis `channel`) to know when each part came to exist, and
 * prints one JSON line: every delivered part's delay after that moment, the origin's own
 * answer time of each reload that waited (its Server-Timing), reloads, and errors
 * (reloads or parts answered other than 200).
 *
 *   bun test/bench/llhls/viewers.ts <master url> <count> <seconds> <redis url> <channel> <rendition>
 */
import { Redis } from "ioredis";
import { parsePlaylist } from "../../support/llhls-validator";

const [master, countText, secondsText, redisUrl, channel, watched] = process.argv.slice(2) as [string, string, string, string, string, string];
const closedAt = new Map<string, number>();
let writing = "";
const bells = new Redis(redisUrl);
bells.on("message", (_channel: string, message: string) => {
  const [rendition, what] = message.split(" ");
  if (rendition !== watched) return;
  if (what === "w") closedAt.set(writing, performance.now());
  else writing = what!;
});
await bells.subscribe(channel);

async function variantOf(url: string): Promise<URL> {
  const text = await fetch(url).then((r) => r.text());
  return new URL(text.split("\n").find((l) => l.includes(`/${watched}/index.m3u8`))!, url);
}

const delays: number[] = [];
const answered: number[] = [];
let reloads = 0;
let errors = 0;
const end = Date.now() + Number(secondsText) * 1000;
await Promise.all(
  Array.from({ length: Number(countText) }, async () => {
    const variant = await variantOf(master);
    let hint = parsePlaylist(await fetch(variant).then((r) => r.text())).preloadHint!;
    while (Date.now() < end) {
      const [msn, part] = hint.replace(/\.m4s$/, "").split(".");
      const reload = await fetch(`${variant.href}&_HLS_msn=${msn}&_HLS_part=${part}`);
      if (!reload.ok) {
        errors++;
        await reload.arrayBuffer();
        hint = parsePlaylist(await fetch(variant).then((r) => r.text())).preloadHint!;
        continue;
      }
      hint = parsePlaylist(await reload.text()).preloadHint!;
      reloads++;
      // Present when the reload waited for its part: the origin's own time from the part to the answer.
      const timing = /part;dur=([\d.]+)/.exec(reload.headers.get("server-timing") ?? "");
      if (timing) answered.push(Number(timing[1]));
      const answer = await fetch(new URL(`${msn}.${part}.m4s`, variant));
      const bytes = await answer.arrayBuffer();
      if (!answer.ok || bytes.byteLength === 0) {
        errors++;
        continue;
      }
      const existed = closedAt.get(`${msn}.${part}`);
      if (existed !== undefined) delays.push(performance.now() - existed);
    }
  }),
);
await bells.quit();
console.log(JSON.stringify({ delays, answered, reloads, errors }));
