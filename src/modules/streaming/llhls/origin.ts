/**
 * The API side of the LL-HLS origin. Each process keeps, for the streams its viewers watch,
 * the renditions' windows and recent parts in memory (stream-view.ts), fed from Redis by the stream's
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
import { closeReader, reader, type RenditionView, StreamView } from "./stream-view";

/** A stream nobody asked for this long is forgotten (and its doorbell left). */
const VIEW_IDLE_MS = 30_000;

let subscriber: RedisClient | undefined;
const views = new Map<string, Promise<StreamView | undefined>>();
let sweeper: ReturnType<typeof setInterval> | undefined;

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
  const closing = [subscriber, closeReader()];
  subscriber = undefined;
  await Promise.all(closing.map((client) => closeClient(client)));
}
