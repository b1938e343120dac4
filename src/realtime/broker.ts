/**
 * How a frame for a topic reaches every socket subscribed to it, and where presence lives.
 * Two implementations of one small interface: `LocalBroker` for a single process, and
 * `RedisBroker`, which also carries frames to the other API processes over Redis pub/sub
 * and keeps presence in Redis hashes. Delivery inside a process always goes through Bun's
 * native topic publish, so a frame is serialised once however many sockets receive it.
 */
import { randomUUID } from "node:crypto";
import type { Server, ServerWebSocket } from "bun";
import type { Redis } from "ioredis";
import { config } from "../config";
import { database } from "../db/client";
import { log } from "../http/log";
import { createRedis, redis, redisKey } from "../queue/connection";

/** A presence entry: Phoenix groups entries by key (the user id) into `{ metas: [...] }`. */
export interface PresenceEntry {
  key: string;
  meta: Record<string, unknown> & { phx_ref: string };
}

export interface Broker {
  /** Sends a frame to every socket on `topic`, on every process; `except` is left out. */
  broadcast(topic: string, frame: string, except?: ServerWebSocket<unknown>): Promise<void>;
  /** This process has a socket on `topic` (counted; resolves once frames from elsewhere will arrive). */
  subscribe(topic: string): Promise<void>;
  unsubscribe(topic: string): Promise<void>;
  track(topic: string, entry: PresenceEntry): Promise<void>;
  untrack(topic: string, ref: string): Promise<void>;
  presence(topic: string): Promise<PresenceEntry[]>;
  close(): Promise<void>;
}

/** The Bun servers of this process that hold sockets (one, except in tests and benchmarks). */
const servers = new Set<Server<unknown>>();

export function attachServer(server: Server<unknown>): void {
  servers.add(server);
}

function deliverLocally(topic: string, frame: string, except?: ServerWebSocket<unknown>): void {
  if (except) {
    // A socket's own publish reaches every other subscriber of its server but not itself.
    except.publish(topic, frame);
    return;
  }
  for (const server of servers) server.publish(topic, frame);
}

export class LocalBroker implements Broker {
  private readonly entries = new Map<string, Map<string, PresenceEntry>>();

  async broadcast(topic: string, frame: string, except?: ServerWebSocket<unknown>) {
    deliverLocally(topic, frame, except);
  }

  async subscribe() {}

  async unsubscribe() {}

  async track(topic: string, entry: PresenceEntry) {
    const byRef = this.entries.get(topic) ?? new Map<string, PresenceEntry>();
    this.entries.set(topic, byRef);
    byRef.set(entry.meta.phx_ref, entry);
  }

  async untrack(topic: string, ref: string) {
    const byRef = this.entries.get(topic);
    byRef?.delete(ref);
    if (byRef?.size === 0) this.entries.delete(topic);
  }

  async presence(topic: string) {
    return [...(this.entries.get(topic)?.values() ?? [])];
  }

  async close() {
    this.entries.clear();
  }
}

/** A process marks itself alive this often; its presence entries die with the mark. */
const NODE_HEARTBEAT_MS = 10_000;
const NODE_TTL_MS = 30_000;

export class RedisBroker implements Broker {
  readonly node = randomUUID();
  private subscriber: Redis | undefined;
  /** Sockets of this process per topic, and the SUBSCRIBE that serves them. */
  private readonly interest = new Map<string, { count: number; ready: Promise<void> }>();
  private readonly heartbeat: ReturnType<typeof setInterval>;

  constructor() {
    this.markAlive();
    this.heartbeat = setInterval(() => this.markAlive(), NODE_HEARTBEAT_MS);
    this.heartbeat.unref?.();
  }

  private markAlive(): void {
    redis()
      .set(redisKey("rt-node", this.node), "1", "PX", NODE_TTL_MS)
      .catch((error: Error) => log.warn({ err: error.message }, "realtime: could not mark this process alive"));
  }

  private channel(topic: string): string {
    return redisKey("rt", topic);
  }

  private listen(): Redis {
    if (this.subscriber) return this.subscriber;
    const subscriber = createRedis("realtime");
    const prefix = redisKey("rt", "");
    subscriber.on("message", (channel: string, text: string) => {
      // The message is "<node id> <frame>"; a process has already delivered its own frames.
      const space = text.indexOf(" ");
      if (space < 0 || text.slice(0, space) === this.node) return;
      deliverLocally(channel.slice(prefix.length), text.slice(space + 1));
    });
    this.subscriber = subscriber;
    return subscriber;
  }

  async broadcast(topic: string, frame: string, except?: ServerWebSocket<unknown>) {
    deliverLocally(topic, frame, except);
    await redis().publish(this.channel(topic), `${this.node} ${frame}`);
  }

  async subscribe(topic: string) {
    const known = this.interest.get(topic);
    if (known) {
      known.count++;
      // A second socket waits for the first one's SUBSCRIBE too, so it misses nothing either.
      await known.ready;
      return;
    }
    const ready = this.listen()
      .subscribe(this.channel(topic))
      .then(() => {});
    this.interest.set(topic, { count: 1, ready });
    await ready;
  }

  async unsubscribe(topic: string) {
    const known = this.interest.get(topic);
    if (!known) return;
    if (--known.count > 0) return;
    this.interest.delete(topic);
    await this.subscriber?.unsubscribe(this.channel(topic));
  }

  private presenceKey(topic: string): string {
    return redisKey("rt-presence", topic);
  }

  async track(topic: string, entry: PresenceEntry) {
    await redis().hset(this.presenceKey(topic), entry.meta.phx_ref, JSON.stringify({ ...entry, node: this.node }));
  }

  async untrack(topic: string, ref: string) {
    await redis().hdel(this.presenceKey(topic), ref);
  }

  async presence(topic: string) {
    const stored = await redis().hgetall(this.presenceKey(topic));
    const entries = Object.entries(stored).map(([ref, json]) => ({ ref, ...(JSON.parse(json) as PresenceEntry & { node: string }) }));
    const nodes = [...new Set(entries.map((entry) => entry.node))];
    if (nodes.length === 0) return [];
    const alive = await redis().mget(...nodes.map((node) => redisKey("rt-node", node)));
    const dead = new Set(nodes.filter((_, i) => alive[i] === null));
    // Entries of a process that died without cleaning up are dropped here, on the next read.
    const stale = entries.filter((entry) => dead.has(entry.node)).map((entry) => entry.ref);
    if (stale.length > 0) await redis().hdel(this.presenceKey(topic), ...stale);
    return entries.filter((entry) => !dead.has(entry.node)).map(({ key, meta }) => ({ key, meta }));
  }

  async close() {
    clearInterval(this.heartbeat);
    await this.subscriber?.quit().catch(() => this.subscriber?.disconnect());
    this.subscriber = undefined;
    await redis()
      .del(redisKey("rt-node", this.node))
      .catch(() => {});
  }
}

let chosen: Broker | undefined;

/** The process's broker, chosen once from REALTIME_BROKER. */
export function broker(): Broker {
  if (!chosen) {
    const kind = config.realtime.broker === "auto" ? (database.kind === "pglite" ? "local" : "redis") : config.realtime.broker;
    chosen = kind === "redis" ? new RedisBroker() : new LocalBroker();
  }
  return chosen;
}

export async function closeBroker(): Promise<void> {
  await chosen?.close();
  chosen = undefined;
}
