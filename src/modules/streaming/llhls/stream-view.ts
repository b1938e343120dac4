/**
 * One process's memory of a live LL-HLS stream: each rendition's window and recent parts,
 * refreshed from Redis, the parts being written followed as they grow, and the waiters on
 * any of it sharing one promise. Apart from the origin (origin.ts), which decides which streams
 * are held, rings their doorbells and answers the viewers' requests from them.
 */
import { log } from "../../../core/log";
import { createRedis, PROMPT_REDIS_MS, type RedisClient, withinRedis } from "../../../queue/connection";
import { llhlsKeys, type RenditionInfo } from "./publisher";
import { holds, type RenditionWindow } from "./window";

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

export class RenditionView {
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

export class StreamView {
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

/** Reads fail after PROMPT_REDIS_MS rather than holding a viewer's request. */
export function reader(): RedisClient {
  readConnection ??= createRedis("llhls-origin", { maxRetriesPerRequest: 0, commandTimeout: PROMPT_REDIS_MS });
  return readConnection;
}

/** The read connection, no longer this module's to use: the origin closes it when it stops. */
export function closeReader(): RedisClient | undefined {
  const closing = readConnection;
  readConnection = undefined;
  return closing;
}
