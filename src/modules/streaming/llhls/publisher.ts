/**
 * The recorder's side of the LL-HLS origin: each rendition's init segment, its parts as they
 * are written, and its playlist window go to Redis with a short lifetime, and every change
 * rings the stream's doorbell (pub/sub), so whichever API process a viewer reaches answers
 * from there. Redis holds only what viewers of the last minute need: the recording is the
 * stream's lasting copy.
 */
import { log } from "../../../core/log";
import { channels, createRedis, type RedisClient, redisKey, tagged } from "../../../queue/connection";
import type { RenditionWindow } from "./window";

/** Parts, segments and windows outlive the playlist (about 20 s) by this much, then Redis drops them. */
const MEDIA_TTL_MS = 60_000;

/**
 * A stream's keys and its doorbell go in one pipeline: on a Cluster they share the stream's
 * slot (a pipeline's keys must), and the doorbell, a sharded channel, rings on that shard.
 */
export const llhlsKeys = {
  renditions: (stream: string) => redisKey("llhls", tagged(stream), "renditions"),
  init: (stream: string, rendition: string) => redisKey("llhls", tagged(stream), rendition, "init"),
  window: (stream: string, rendition: string) => redisKey("llhls", tagged(stream), rendition, "window"),
  part: (stream: string, rendition: string, msn: number, part: number) =>
    redisKey("llhls", tagged(stream), rendition, `${msn}.${part}`),
  /** Without the prefix: pub/sub channels are prefixed by whoever publishes or subscribes. */
  doorbell: (stream: string) => `llhls:${tagged(stream)}`,
};

/**
 * A doorbell message: `<rendition> w` when the window changed (a part closed), or
 * `<rendition> <msn>.<part> <bytes so far>` when bytes were appended to the part being written.
 */
export type Doorbell =
  | { rendition: string; window: true }
  | { rendition: string; window: false; msn: number; part: number; size: number };

export function parseDoorbell(message: string): Doorbell | undefined {
  const [rendition, what, size] = message.split(" ");
  if (!rendition || !what) return undefined;
  if (what === "w") return { rendition, window: true };
  const [msn, part] = what.split(".").map(Number);
  if (!Number.isInteger(msn) || !Number.isInteger(part)) return undefined;
  return { rendition, window: false, msn: msn!, part: part!, size: Number(size) };
}

/** What the multivariant playlist says of a rendition. */
export interface RenditionInfo {
  name: string;
  bandwidth: number;
  width?: number;
  height?: number;
  codecs?: string;
}

let media: RedisClient | undefined;

/** Media is worth nothing late: commands fail at the first failed reconnection instead of waiting for Redis. */
function mediaRedis(): RedisClient {
  media ??= createRedis("llhls-media", { maxRetriesPerRequest: 0 });
  return media;
}

export class StreamPublisher {
  /** Per rendition, the part being written and its bytes so far. */
  private readonly sizes = new Map<string, { key: string; size: number }>();
  private failing = false;
  private readonly inits = new Map<string, Buffer>();

  constructor(
    readonly streamName: string,
    private readonly renditions: RenditionInfo[],
  ) {}

  private run(what: string, commands: (pipeline: ReturnType<RedisClient["pipeline"]>) => void): void {
    const pipeline = mediaRedis().pipeline();
    commands(pipeline);
    pipeline.exec().then(
      () => {
        if (this.failing) log.info({ stream: this.streamName }, "LL-HLS media reaches Redis again");
        this.failing = false;
      },
      (error: Error) => {
        // Logged once per outage: viewers miss parts meanwhile, the stream and its recording go on.
        if (!this.failing)
          log.warn(
            { stream: this.streamName, what, err: error.message },
            "LL-HLS media not stored: Redis is unavailable",
          );
        this.failing = true;
      },
    );
  }

  init(rendition: string, bytes: Buffer, codecs: string): void {
    const info = this.renditions.find((r) => r.name === rendition);
    if (info) info.codecs = codecs;
    this.inits.set(rendition, bytes);
  }

  chunk(rendition: string, msn: number, part: number, bytes: Buffer): void {
    const key = llhlsKeys.part(this.streamName, rendition, msn, part);
    const current = this.sizes.get(rendition);
    const size = (current?.key === key ? current.size : 0) + bytes.length;
    this.sizes.set(rendition, { key, size });
    this.run("part", (p) => {
      p.append(key, bytes);
      p.pexpire(key, MEDIA_TTL_MS);
      channels.publishIn(p, redisKey(llhlsKeys.doorbell(this.streamName)), `${rendition} ${msn}.${part} ${size}`);
    });
  }

  window(rendition: string, window: RenditionWindow): void {
    this.run("window", (p) => {
      // The init segment (a kilobyte) and the rendition list are written with every window, so
      // they live as long as it does and a write lost while Redis was away is made good.
      const init = this.inits.get(rendition);
      if (init) p.set(llhlsKeys.init(this.streamName, rendition), init, "PX", MEDIA_TTL_MS);
      p.set(llhlsKeys.renditions(this.streamName), JSON.stringify(this.renditions), "PX", MEDIA_TTL_MS);
      p.set(llhlsKeys.window(this.streamName, rendition), JSON.stringify(window), "PX", MEDIA_TTL_MS);
      channels.publishIn(p, redisKey(llhlsKeys.doorbell(this.streamName)), `${rendition} w`);
    });
  }
}
