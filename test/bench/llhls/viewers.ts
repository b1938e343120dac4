/**
 * One process of LL-HLS benchmark viewers: `count` players against `master` for `seconds`,
 * each making a blocking reload on the preload hint and then fetching that part, over one
 * HTTP/1.1 keep-alive connection of its own, as LL-HLS players do. It hears the stream's
 * doorbell itself (Redis `channel`) to know when each part came to exist.
 *
 * The client is kept cheap so that what is measured is the origin, not the players: raw
 * sockets, requests written as prepared text, answers parsed in place in a buffer per viewer
 * (status, length, and the preload hint found from the end of the playlist), no Request or
 * Response objects. Its own CPU time is reported beside what it saw.
 *
 * All the players join at once, a flash crowd of 500 connections and first playlists that
 * holds the origin's event loop while the next part comes to exist. So what a part's delivery
 * costs in a steady audience is counted from the first part that came to exist after every
 * player of this process had its first blocking reload answered; the parts before it are the
 * join, kept apart.
 *
 * Prints one JSON line: every delivered part's delay after the part came to exist (steady, and
 * during the join), every reload's answer after the same moment, the origin's own answer time
 * of each reload that waited (its Server-Timing), reloads, errors (answers other than 200), the
 * parts that came to exist meanwhile, and its CPU seconds.
 *
 *   bun test/bench/llhls/viewers.ts <master url> <count> <seconds> <redis url> <channel> <rendition>
 */
import { Redis } from "ioredis";

const [master, countText, secondsText, redisUrl, channel, watched] = process.argv.slice(2) as [
  string,
  string,
  string,
  string,
  string,
  string,
];
const closedAt = new Map<string, number>();
let writing = "";
/** Parts that came to exist while the players ran. */
let parts = 0;
const end = Date.now() + Number(secondsText) * 1000;
const bells = new Redis(redisUrl);
bells.on("message", (_channel: string, message: string) => {
  const [rendition, what] = message.split(" ");
  if (rendition !== watched) return;
  if (what !== "w") writing = what!;
  else if (!closedAt.has(writing)) {
    closedAt.set(writing, performance.now());
    if (Date.now() < end) parts++;
  }
});
await bells.subscribe(channel);

const delays: number[] = [];
const joining: number[] = [];
let playersJoined = 0;
/** When the last player of this process had its first blocking reload answered: the join is over. */
let joinedAt = Number.POSITIVE_INFINITY;
const reloaded: number[] = [];
const answered: number[] = [];
let reloads = 0;
let errors = 0;

const HEAD_END = Buffer.from("\r\n\r\n");
const HINT = Buffer.from('PRELOAD-HINT:TYPE=PART,URI="');
// Bun writes well-known header names capitalised; lower case covers a server or proxy that does not.
const LENGTH = [Buffer.from("Content-Length:"), Buffer.from("content-length:")];
const TIMING = [Buffer.from("Server-Timing: part;dur="), Buffer.from("server-timing: part;dur=")];

/** One player: its own connection, its own receive buffer, one request at a time. */
class Viewer {
  private buffer = Buffer.allocUnsafe(64 * 1024);
  private have = 0;
  private socket!: Bun.Socket<undefined>;
  private waiting: ((ok: boolean) => void) | undefined;
  private bodyStart = 0;
  private bodyLength = 0;
  private status = 0;
  /** The Server-Timing value of the last answer, or -1. */
  timing = -1;

  constructor(
    private readonly host: string,
    private readonly port: number,
  ) {}

  async connect(): Promise<void> {
    const self = this;
    this.socket = await Bun.connect({
      hostname: this.host,
      port: this.port,
      socket: {
        data(_socket, chunk) {
          self.received(chunk);
        },
        close() {
          self.waiting?.(false);
        },
        error() {
          self.waiting?.(false);
        },
      },
    });
  }

  private received(chunk: Uint8Array): void {
    if (this.have + chunk.length > this.buffer.length) {
      const larger = Buffer.allocUnsafe(Math.max(this.buffer.length * 2, this.have + chunk.length));
      this.buffer.copy(larger, 0, 0, this.have);
      this.buffer = larger;
    }
    this.buffer.set(chunk, this.have);
    this.have += chunk.length;
    if (this.bodyStart === 0) {
      const head = this.buffer.indexOf(HEAD_END, 0);
      if (head < 0 || head > this.have) return;
      this.bodyStart = head + 4;
      this.status = (this.buffer[9]! - 48) * 100 + (this.buffer[10]! - 48) * 10 + (this.buffer[11]! - 48);
      this.bodyLength = this.number(this.headerAt(LENGTH, head));
      const timing = this.headerAt(TIMING, head);
      this.timing = timing < 0 ? -1 : this.number(timing);
    }
    if (this.have >= this.bodyStart + this.bodyLength) this.waiting?.(true);
  }

  /** Where the value of a header starts within the head, or -1. */
  private headerAt(names: Buffer[], headEnd: number): number {
    for (const name of names) {
      const at = this.buffer.indexOf(name, 0);
      if (at >= 0 && at < headEnd) return at + name.length;
    }
    return -1;
  }

  private number(at: number): number {
    if (at < 0) return 0;
    let index = at;
    while (this.buffer[index] === 32) index++;
    let value = 0;
    let fraction = 0;
    for (; ; index++) {
      const c = this.buffer[index]!;
      if (c === 46) fraction = 1;
      else if (c >= 48 && c <= 57) {
        if (fraction) fraction /= 10;
        value = fraction ? value + (c - 48) * fraction : value * 10 + (c - 48);
      } else return value;
    }
  }

  /** Sends a GET and waits for the whole answer; its body is `body()` until the next request. */
  get(path: string): Promise<number> {
    this.have = 0;
    this.bodyStart = 0;
    this.bodyLength = 0;
    return new Promise((resolve) => {
      this.waiting = (ok) => {
        this.waiting = undefined;
        resolve(ok ? this.status : 0);
      };
      this.socket.write(`GET ${path} HTTP/1.1\r\nhost: ${this.host}\r\n\r\n`);
    });
  }

  /** The preload hint's `<msn>.<part>` in the last answer (a playlist), found from its end. */
  hint(): string {
    const at = this.buffer.lastIndexOf(HINT, this.have);
    if (at < this.bodyStart) return "";
    const start = at + HINT.length;
    // `<msn>.<part>.m4s`: up to the second dot.
    return this.buffer.toString("latin1", start, this.buffer.indexOf(46, this.buffer.indexOf(46, start) + 1));
  }

  close(): void {
    this.socket.end();
  }
}

async function variantOf(url: string): Promise<URL> {
  const text = await fetch(url).then((r) => r.text());
  return new URL(text.split("\n").find((l) => l.includes(`/${watched}/index.m3u8`))!, url);
}

async function play(): Promise<void> {
  const variant = await variantOf(master);
  const viewer = new Viewer(variant.hostname, Number(variant.port));
  await viewer.connect();
  const playlist = `${variant.pathname}${variant.search}`;
  const directory = variant.pathname.slice(0, variant.pathname.lastIndexOf("/") + 1);
  if ((await viewer.get(playlist)) !== 200) throw new Error("the media playlist is not there");
  let hint = viewer.hint();
  let reloadsMade = 0;
  while (Date.now() < end) {
    const dot = hint.indexOf(".");
    const status = await viewer.get(`${playlist}&_HLS_msn=${hint.slice(0, dot)}&_HLS_part=${hint.slice(dot + 1)}`);
    if (status !== 200) {
      errors++;
      if (status === 0 || (await viewer.get(playlist)) !== 200) return;
      hint = viewer.hint();
      continue;
    }
    if (reloadsMade++ === 0 && ++playersJoined === Number(countText)) joinedAt = performance.now();
    const existed = closedAt.get(hint);
    const steady = existed !== undefined && existed > joinedAt;
    if (steady) reloaded.push(performance.now() - existed);
    reloads++;
    // Present when the reload waited for its part: the origin's own time from the part to the answer.
    if (steady && viewer.timing >= 0) answered.push(viewer.timing);
    const next = viewer.hint();
    const part = await viewer.get(`${directory}${hint}.m4s`);
    if (part !== 200) errors++;
    else if (existed !== undefined) (steady ? delays : joining).push(performance.now() - existed);
    hint = next;
  }
  viewer.close();
}

const cpu = process.cpuUsage();
await Promise.all(Array.from({ length: Number(countText) }, play));
const used = process.cpuUsage(cpu);
await bells.quit();
console.log(
  JSON.stringify({
    delays,
    joining,
    reloaded,
    answered,
    reloads,
    errors,
    parts,
    cpuSeconds: (used.user + used.system) / 1e6,
  }),
);
