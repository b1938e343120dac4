/**
 * The API side of the LL-HLS origin. Each process keeps, for the streams its viewers watch,
 * the renditions' windows and recent parts in memory, fed from Redis by the stream's
 * doorbell: one fetch per change per process, however many viewers wait on it. Blocking
 * reloads and the preload-hinted part wait here, woken by the doorbell, with a slow poll
 * behind it for a message lost with a dropped connection.
 */
import { AppError } from "../../../core/errors";
import { log } from "../../../core/log";
import {
  channels,
  closeClient,
  createRedis,
  PROMPT_REDIS_MS,
  type RedisClient,
  redisKey,
  settledWithin,
  untagged,
  withinRedis,
} from "../../../queue/connection";
import { type Doorbell, llhlsKeys, parseDoorbell, type RenditionInfo } from "./publisher";
import {
  BLOCK_TARGET_DURATIONS,
  blockingAnswer,
  type Directives,
  holds,
  mediaPlaylist,
  multivariantPlaylist,
  type RenditionWindow,
} from "./window";

/** A stream nobody asked for this long is forgotten (and its doorbell left). */
const VIEW_IDLE_MS = 30_000;
/** Waiters look at Redis themselves this often, should a doorbell be missed. */
const POLL_MS = 500;
/** Closed parts a process keeps per rendition: a little more than the parts the playlist lists. */
const CACHED_PARTS = 40;

interface GrowingPart {
  chunks: Buffer[];
  have: number;
  done: boolean;
  listeners: Set<(chunk: Buffer | undefined) => void>;
  /** Fetches of one part run one after another, so bytes arrive in order. */
  chain: Promise<void>;
}

class RenditionView {
  window: RenditionWindow | undefined;
  /** When this process learnt of the current window (performance.now()). */
  windowAt = 0;
  private refreshing: Promise<void> | undefined;
  private again = false;
  private refreshedAt = 0;
  /**
   * Settles at the next change a waiter may be waiting for (the window, or bytes of a part
   * being written), then is replaced: the 500 viewers waiting on a part share one promise
   * and one poll, rather than a timer each, re-armed at every frame.
   */
  private changed!: Promise<void>;
  private announce!: () => void;
  private waiting = 0;
  private poller: ReturnType<typeof setInterval> | undefined;
  readonly parts = new Map<string, Buffer>();
  /** Reads of closed parts under way, shared by everyone asking meanwhile. */
  readonly reading = new Map<string, Promise<Buffer>>();
  readonly growing = new Map<string, GrowingPart>();
  init: Buffer | undefined;
  texts = new Map<boolean, string>();

  constructor(
    readonly stream: StreamView,
    readonly name: string,
  ) {
    this.nextChange();
  }

  private nextChange(): void {
    this.changed = new Promise<void>((resolve) => (this.announce = resolve));
  }

  /** Has every waiter look again. */
  private wake(): void {
    const announce = this.announce;
    this.nextChange();
    announce();
  }

  /** Reads the window again; calls while one read is under way make one more read after it. */
  refresh(): Promise<void> {
    if (this.refreshing) {
      this.again = true;
      return this.refreshing;
    }
    this.refreshing = (async () => {
      do {
        this.again = false;
        this.refreshedAt = Date.now();
        const text = await withinRedis(reader(), "reading an LL-HLS playlist window", () =>
          reader().get(llhlsKeys.window(this.stream.name, this.name)),
        );
        if (text) this.setWindow(JSON.parse(text) as RenditionWindow);
      } while (this.again);
    })().finally(() => {
      this.refreshing = undefined;
    });
    return this.refreshing;
  }

  /** Reads the window again when no read has begun for POLL_MS (a doorbell may have been lost), else nothing. */
  refreshIfQuiet(): Promise<void> {
    return Date.now() - this.refreshedAt >= POLL_MS ? this.refresh() : Promise.resolve();
  }

  private setWindow(window: RenditionWindow): void {
    const before = this.window;
    if (
      before &&
      (window.next.msn < before.next.msn ||
        (window.next.msn === before.next.msn && window.next.part < before.next.part))
    )
      return;
    this.window = window;
    this.windowAt = performance.now();
    this.texts.clear();
    for (const [key, growing] of this.growing) {
      const [msn, part] = key.split(".").map(Number);
      if (holds(window, msn!, part)) this.finishGrowing(key, growing);
    }
    this.wake();
  }

  /**
   * Waits until `ready` holds, `timeoutMs` passes or `gone` aborts (the viewer left); answers
   * whether it held. Woken by the doorbell, and while anyone waits the window is read every
   * POLL_MS, should one be missed.
   */
  async waitFor(ready: () => boolean, timeoutMs: number, gone?: AbortSignal): Promise<boolean> {
    if (ready()) return true;
    let expired = false;
    let expire: () => void = () => {};
    const deadline = new Promise<void>((resolve) => (expire = resolve));
    const stop = () => {
      expired = true;
      expire();
    };
    const timer = setTimeout(stop, timeoutMs);
    gone?.addEventListener("abort", stop, { once: true });
    this.waiting++;
    this.poller ??= setInterval(() => this.refreshIfQuiet().catch(() => {}), POLL_MS);
    try {
      while (!ready()) {
        if (expired) return false;
        await Promise.race([this.changed, deadline]);
      }
      return true;
    } finally {
      clearTimeout(timer);
      gone?.removeEventListener("abort", stop);
      if (--this.waiting === 0) {
        clearInterval(this.poller);
        this.poller = undefined;
      }
    }
  }

  /** New bytes of a part being written: fetched once for every viewer of this process that streams it. */
  appended(msn: number, part: number, size: number): void {
    const key = `${msn}.${part}`;
    const growing = this.growing.get(key);
    if (!growing || growing.done) return;
    this.fetchMore(key, growing, size);
  }

  private fetchMore(key: string, growing: GrowingPart, size?: number): void {
    growing.chain = growing.chain.then(async () => {
      if (growing.done || (size !== undefined && growing.have >= size)) return;
      const bytes = await reader().getrangeBuffer(this.partKey(key), growing.have, -1);
      if (bytes.length === 0 || growing.done) return;
      growing.chunks.push(bytes);
      growing.have += bytes.length;
      for (const listener of growing.listeners) listener(bytes);
      // A request for the hinted part waits for its first bytes.
      this.wake();
    });
    growing.chain = growing.chain.catch((error: Error) =>
      log.warn({ stream: this.stream.name, err: error.message }, "could not read a part being written"),
    );
  }

  private finishGrowing(key: string, growing: GrowingPart): void {
    // The last bytes, then the end: the part is whole in Redis now.
    this.fetchMore(key, growing);
    growing.chain = growing.chain.then(() => {
      growing.done = true;
      const whole = Buffer.concat(growing.chunks);
      if (whole.length > 0) this.keepPart(key, whole);
      for (const listener of growing.listeners) listener(undefined);
      this.growing.delete(key);
      this.wake();
    });
  }

  partKey(key: string): string {
    const [msn, part] = key.split(".").map(Number);
    return llhlsKeys.part(this.stream.name, this.name, msn!, part!);
  }

  keepPart(key: string, bytes: Buffer): void {
    this.parts.set(key, bytes);
    if (this.parts.size > CACHED_PARTS) this.parts.delete(this.parts.keys().next().value!);
  }

  /** The part being written, followed from its first bytes: every listener gets all of it, in order. */
  follow(key: string): GrowingPart {
    let growing = this.growing.get(key);
    if (!growing) {
      growing = { chunks: [], have: 0, done: false, listeners: new Set(), chain: Promise.resolve() };
      this.growing.set(key, growing);
      this.fetchMore(key, growing);
    }
    return growing;
  }
}

class StreamView {
  lastUsed = Date.now();
  readonly renditions = new Map<string, RenditionView>();

  constructor(
    readonly name: string,
    readonly infos: RenditionInfo[],
  ) {
    for (const info of infos) this.renditions.set(info.name, new RenditionView(this, info.name));
  }

  rendition(name: string): RenditionView | undefined {
    return this.renditions.get(name);
  }
}

let readConnection: RedisClient | undefined;
let subscriber: RedisClient | undefined;
const views = new Map<string, Promise<StreamView | undefined>>();
let sweeper: ReturnType<typeof setInterval> | undefined;

/** Reads fail after PROMPT_REDIS_MS rather than holding a viewer's request. */
function reader(): RedisClient {
  readConnection ??= createRedis("llhls-origin", { maxRetriesPerRequest: 0, commandTimeout: PROMPT_REDIS_MS });
  return readConnection;
}

function doorbells(): RedisClient {
  if (!subscriber) {
    subscriber = createRedis("llhls-doorbell");
    const prefix = redisKey("");
    channels.onMessage(subscriber, (channel, message) => {
      const stream = untagged(channel.slice(prefix.length + "llhls:".length));
      const bell = parseDoorbell(message);
      if (bell) void ring(stream, bell);
    });
    sweeper = setInterval(forgetIdle, VIEW_IDLE_MS / 3);
    sweeper.unref?.();
  }
  return subscriber;
}

async function ring(stream: string, bell: Doorbell): Promise<void> {
  // A view whose first read failed has nothing to refresh: that failure was answered to whoever asked.
  const view = await views.get(stream)?.catch(() => undefined);
  const rendition = view?.rendition(bell.rendition);
  if (!rendition) return;
  if (bell.window)
    await rendition
      .refresh()
      .catch((error: Error) => log.warn({ stream, err: error.message }, "could not read an LL-HLS window"));
  else rendition.appended(bell.msn, bell.part, bell.size);
}

function forgetIdle(): void {
  for (const [name, pending] of views) {
    // A view whose first read failed is forgotten by viewOf, and its failure answered there.
    void pending.then(
      (view) => {
        if (view && Date.now() - view.lastUsed < VIEW_IDLE_MS) return;
        views.delete(name);
        if (view) {
          if (subscriber) void channels.unsubscribe(subscriber, redisKey(llhlsKeys.doorbell(name))).catch(() => {});
        }
      },
      () => {},
    );
  }
}

/** The stream's view in this process, made on first use: undefined when Redis knows no LL-HLS stream by that name. */
async function viewOf(stream: string): Promise<StreamView | undefined> {
  let pending = views.get(stream);
  if (!pending) {
    pending = (async () => {
      // Subscribed before the first read, so no change falls between the two; a subscription
      // held up by Redis is not waited for (waiters poll meanwhile), the read fails with a 503.
      await settledWithin(channels.subscribe(doorbells(), redisKey(llhlsKeys.doorbell(stream))), PROMPT_REDIS_MS);
      const infos = await withinRedis(reader(), "reading an LL-HLS stream", () =>
        reader().get(llhlsKeys.renditions(stream)),
      );
      if (!infos) return undefined;
      const view = new StreamView(stream, JSON.parse(infos) as RenditionInfo[]);
      await Promise.all([...view.renditions.values()].map((r) => r.refresh()));
      return view;
    })();
    views.set(stream, pending);
    // A stream not (yet) publishing is asked again next time, not remembered as missing.
    pending.then(
      (view) => view ?? views.delete(stream),
      () => views.delete(stream),
    );
  }
  const view = await pending;
  if (view) view.lastUsed = Date.now();
  return view;
}

const noStream = () => new AppError("not_found", "no low-latency stream by that name is live");

async function renditionOf(stream: string, rendition: string): Promise<RenditionView> {
  const view = await viewOf(stream);
  const found = view?.rendition(rendition);
  if (!found?.window) throw noStream();
  return found;
}

/** The multivariant playlist; `query` is appended to each variant's address (it carries the viewer). */
export async function multivariant(stream: string, query: string): Promise<string> {
  const view = await viewOf(stream);
  if (!view) throw noStream();
  return multivariantPlaylist(
    view.infos.map((info) => ({
      uri: `${stream}/${info.name}/index.m3u8${query}`,
      bandwidth: info.bandwidth,
      width: info.width,
      height: info.height,
      codecs: info.codecs ?? "avc1.4d401f,mp4a.40.2",
    })),
  );
}

export interface PlaylistAnswer {
  text: string;
  /** A blocking reload's answer: the same address answers differently later, so it is not cached. */
  blocking: boolean;
  /** For a reload that waited: ms from this process learning of the part to the answer. */
  afterPartMs?: number;
}

/** A rendition's media playlist, once it holds what the delivery directives ask for (RFC 8216bis 6.2.5.2). */
export async function mediaPlaylistOf(
  stream: string,
  name: string,
  directives: Directives,
  gone?: AbortSignal,
): Promise<PlaylistAnswer> {
  const rendition = await renditionOf(stream, name);
  const blocking = directives.msn !== undefined;
  let waited = false;
  if (blocking) {
    const { msn, part } = directives as { msn: number; part?: number };
    if (blockingAnswer(rendition.window!, msn, part) === "too_far") {
      throw new AppError(
        "bad_request",
        "_HLS_msn/_HLS_part ask for more than two segments (or three parts) past the playlist's end",
      );
    }
    const waitMs = BLOCK_TARGET_DURATIONS * rendition.window!.targetDuration * 1000;
    waited = blockingAnswer(rendition.window!, msn, part) === "wait";
    const ready = () => blockingAnswer(rendition.window!, msn, part) !== "wait";
    const answered = await rendition.waitFor(ready, waitMs, gone);
    if (!answered)
      throw new AppError("dependency_down", "the part asked for did not arrive within three target durations");
    if (blockingAnswer(rendition.window!, msn, part) === "too_far")
      throw new AppError("bad_request", "the playlist no longer reaches that far");
  } else {
    // When no doorbell has rung for a while, the stream ended, paused, or its last doorbell (or
    // the read it rang for) was lost. A plain reload reads the window again rather than answer an old one
    // for ever; if Redis fails that read, what this process has is still the best answer.
    await rendition.refreshIfQuiet().catch(() => {});
  }
  let text = rendition.texts.get(directives.skip);
  if (!text) {
    const others = [...rendition.stream.renditions.values()].filter((r) => r !== rendition && r.window);
    text = mediaPlaylist(rendition.window!, {
      skip: directives.skip,
      reports: others.map((r) => ({ uri: `../${r.name}/index.m3u8`, window: r.window! })),
    });
    rendition.texts.set(directives.skip, text);
  }
  return { text, blocking, afterPartMs: waited ? performance.now() - rendition.windowAt : undefined };
}

export async function initSegment(stream: string, name: string): Promise<Buffer> {
  const rendition = await renditionOf(stream, name);
  rendition.init ??=
    (await withinRedis(reader(), "reading an LL-HLS init segment", () =>
      reader().getBuffer(llhlsKeys.init(stream, name)),
    )) ?? undefined;
  if (!rendition.init) throw noStream();
  return rendition.init;
}

/**
 * A whole part: from this process's memory, else from Redis, read once however many viewers
 * ask for it at the same moment (they all do, right after the playlist names it).
 */
function closedPart(rendition: RenditionView, key: string): Promise<Buffer> {
  const cached = rendition.parts.get(key);
  if (cached) return Promise.resolve(cached);
  let reading = rendition.reading.get(key);
  if (!reading) {
    reading = withinRedis(reader(), "reading an LL-HLS part", () => reader().getBuffer(rendition.partKey(key)))
      .then((bytes) => {
        if (!bytes) throw new AppError("not_found", "that part is no longer kept");
        rendition.keepPart(key, bytes);
        return bytes;
      })
      .finally(() => rendition.reading.delete(key));
    rendition.reading.set(key, reading);
  }
  return reading;
}

export type PartAnswer = { bytes: Buffer } | { stream: ReadableStream<Uint8Array> };

/**
 * A part. One that exists is answered whole; the preload-hinted part is answered as it is
 * written, its bytes passed on as they arrive, once the first ones are there.
 */
export async function partOf(
  stream: string,
  name: string,
  msn: number,
  part: number,
  gone?: AbortSignal,
): Promise<PartAnswer> {
  const rendition = await renditionOf(stream, name);
  const key = `${msn}.${part}`;
  const window = rendition.window!;
  if (holds(window, msn, part)) {
    const segment = window.segments.find((s) => s.msn === msn);
    if (segment && part >= segment.parts.length) throw new AppError("not_found", "the segment has no such part");
    return { bytes: await closedPart(rendition, key) };
  }
  const { next } = window;
  if (msn !== next.msn || part !== next.part)
    throw new AppError("not_found", "only the part named by the preload hint can be asked for before it exists");
  const growing = rendition.follow(key);
  const waitMs = BLOCK_TARGET_DURATIONS * window.targetDuration * 1000;
  const started = await rendition.waitFor(
    () => growing.have > 0 || growing.done || !rendition.growing.has(key) || !samePart(rendition.window!, msn, part),
    waitMs,
    gone,
  );
  if (!started) throw new AppError("dependency_down", "the hinted part did not begin within three target durations");
  let listener: (chunk: Buffer | undefined) => void = () => {};
  if (growing.have === 0) {
    // The writer moved on without it (a segment that ended sooner than foreseen), or it closed at once.
    if (holds(rendition.window!, msn, part)) return { bytes: await closedPart(rendition, key) };
    throw new AppError("not_found", "the hinted part was not written; reload the playlist");
  }
  return {
    stream: new ReadableStream<Uint8Array>({
      start(controller) {
        for (const chunk of growing.chunks) controller.enqueue(chunk);
        if (growing.done) return controller.close();
        listener = (chunk: Buffer | undefined) => {
          if (chunk) return controller.enqueue(chunk);
          growing.listeners.delete(listener);
          controller.close();
        };
        growing.listeners.add(listener);
      },
      // A viewer that goes away stops being written to.
      cancel() {
        growing.listeners.delete(listener);
      },
    }),
  };
}

/** The window still names (msn, part) as what comes next, or has closed it. */
function samePart(window: RenditionWindow, msn: number, part: number): boolean {
  return (window.next.msn === msn && window.next.part === part) || holds(window, msn, part);
}

/** A whole segment: its parts one after the other. */
export async function segmentOf(stream: string, name: string, msn: number): Promise<Buffer> {
  const rendition = await renditionOf(stream, name);
  const segment = rendition.window!.segments.find((s) => s.msn === msn);
  if (!segment?.complete) throw new AppError("not_found", "no whole segment by that number");
  const parts = await Promise.all(segment.parts.map((_, index) => closedPart(rendition, `${msn}.${index}`)));
  return Buffer.concat(parts);
}

export async function stopLlhlsOrigin(): Promise<void> {
  clearInterval(sweeper);
  sweeper = undefined;
  views.clear();
  const closing = [subscriber, readConnection];
  subscriber = undefined;
  readConnection = undefined;
  await Promise.all(closing.map((client) => closeClient(client)));
}
