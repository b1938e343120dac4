/**
 * The broker for several API processes: frames cross between
 * processes over Redis pub/sub, presence lives in Redis hashes.
 */
import { randomUUID } from "node:crypto";
import type { ServerWebSocket } from "bun";
import { log } from "../core/log";
import {
  channels,
  closeClient,
  createRedis,
  disconnected,
  onCluster,
  PROMPT_REDIS_MS,
  promptRedis,
  type RedisClient,
  redisKey,
  settledWithin,
  tagged,
  untagged,
  withinRedis,
} from "../queue/connection";
import type { Broker, PresenceEntry } from "./broker";
import { deliverLocally } from "./local-broker";

/** A process marks itself alive this often; its presence entries and interest die with the mark. */
const NODE_HEARTBEAT_MS = 10_000;
const NODE_TTL_MS = 30_000;
/**
 * Publishes frames to a topic's channel, one message each and in order, only when a process
 * other than the caller has sockets on the topic (KEYS[1] is the set of processes that do),
 * so a topic that lives on one process costs Redis one cheap call and no pub/sub traffic.
 * Redis runs it atomically: a process whose SADD has been answered receives every later frame.
 * ARGV: the caller's node id, the channel, then the frames; each message is "<node> <frame>".
 * On a Cluster the channel is sharded (SPUBLISH), tagged like the set so both are on one slot.
 */
const publishWhereInterested = (command: "PUBLISH" | "SPUBLISH") => `
if redis.call('SCARD', KEYS[1]) - redis.call('SISMEMBER', KEYS[1], ARGV[1]) > 0 then
  local received = 0
  for i = 3, #ARGV do
    received = received + redis.call('${command}', ARGV[2], ARGV[1] .. ' ' .. ARGV[i])
  end
  return received
end
return 0`;

/**
 * Marks of live processes: read several at once (MGET), so on a Cluster they share one slot.
 * They are one short key per API process.
 */
const PUBLISH = publishWhereInterested("PUBLISH");
const SHARDED_PUBLISH = publishWhereInterested("SPUBLISH");

const nodeKey = (node: string) => redisKey(tagged("rt-node"), node);

/**
 * Redis is only the way between processes: a frame is delivered to this process's sockets
 * first, and presence entries of this process are also kept here. So while Redis is away a
 * socket still gets its replies and its own process's traffic and presence; fan-out to other
 * processes is skipped (logged once), and this process's interest and entries are written
 * back once Redis returns.
 */
export class RedisBroker implements Broker {
  readonly node = randomUUID();
  private subscriber: RedisClient | undefined;
  /**
   * Frames for other processes: one connection, so they leave in the order they were
   * broadcast (per topic, as everywhere), and auto-pipelined, so a burst of broadcasts
   * costs a few socket writes rather than a round trip each. Frames in flight when the
   * connection breaks fail rather than wait for Redis (no retries), and none are handed to
   * it while it is lost, so nothing piles up in memory during an outage.
   */
  private readonly publisher = createRedis("realtime-publish", { enableAutoPipelining: true, maxRetriesPerRequest: 0 });
  /** Sockets of this process per topic, and the SUBSCRIBE (then SADD) that serves them. */
  private readonly interest = new Map<string, { count: number; ready: Promise<void> }>();
  /** Presence entries tracked by this process, by topic and ref. */
  private readonly tracked = new Map<string, Map<string, PresenceEntry>>();
  private readonly heartbeat: ReturnType<typeof setInterval>;
  private readonly onReady = () => this.restore();
  private readonly onPublisherReady = () => this.fanOutBack();
  /** The latest frames handed to the publisher: its connection answers in order, so these answering means all did. */
  private lastPublish: Promise<unknown> = Promise.resolve();
  /**
   * Frames broadcast in this turn of the event loop, by topic in the order broadcast: one
   * script call a topic carries them all at the turn's end, rather than one call a frame.
   */
  private outgoing: Map<string, string[]> | undefined;
  private readonly sendOutgoing = () => this.flush();
  /** Fan-out has failed since the publisher last connected: logged once, not per frame. */
  private fanOutLost = false;

  constructor() {
    this.markAlive();
    this.heartbeat = setInterval(() => this.markAlive(), NODE_HEARTBEAT_MS);
    this.heartbeat.unref?.();
    // A Redis that comes back may have lost everything (a restart without persistence).
    promptRedis().on("ready", this.onReady);
    this.publisher.on("ready", this.onPublisherReady);
  }

  private markAlive(): Promise<void> {
    const client = promptRedis();
    return withinRedis(client, "marking this process alive", () =>
      client.set(nodeKey(this.node), "1", "PX", NODE_TTL_MS, "GET"),
    ).then(
      (earlier) => {
        // The mark had lapsed (Redis was out of reach): another process may have dropped this one's interest.
        if (earlier === null && this.interest.size > 0) return this.declareInterest();
      },
      (error: Error) => log.warn({ err: error.message }, "realtime: could not mark this process alive"),
    );
  }

  private async restore(): Promise<void> {
    await this.markAlive();
    // Declared again even when the mark survived: an outage may have cut a join's SADD or a leave's SREM.
    await this.declareInterest();
    for (const [topic, byRef] of this.tracked) {
      for (const entry of byRef.values()) await this.store(topic, entry).catch(() => {});
    }
  }

  private channel(topic: string): string {
    return redisKey("rt", tagged(topic));
  }

  private interestKey(topic: string): string {
    return redisKey("rt-interest", tagged(topic));
  }

  /** Writes this process into the interest set of every topic it has sockets on. */
  private async declareInterest(): Promise<void> {
    const topics = [...this.interest.keys()];
    if (topics.length === 0) return;
    const client = promptRedis();
    // Each its own command (still written back to back): on a Cluster the topics' sets are on different slots.
    const declared = () => Promise.all(topics.map((topic) => client.sadd(this.interestKey(topic), this.node)));
    await withinRedis(client, "declaring interest", declared).catch((error: Error) =>
      log.warn(
        { err: error.message },
        "realtime: could not declare this process's topics; declared again when Redis is back",
      ),
    );
  }

  private listen(): RedisClient {
    if (this.subscriber) return this.subscriber;
    const subscriber = createRedis("realtime");
    const prefix = redisKey("rt", "");
    channels.onMessage(subscriber, (channel, text) => {
      // The message is "<node id> <frame>"; a process has already delivered its own frames.
      const space = text.indexOf(" ");
      if (space < 0 || (space === this.node.length && text.startsWith(this.node))) return;
      deliverLocally(untagged(channel.slice(prefix.length)), text.slice(space + 1));
    });
    this.subscriber = subscriber;
    return subscriber;
  }

  async handedOn(): Promise<void> {
    // Frames of this turn not sent yet go now, so the wait covers them too.
    this.flush();
    // A failure was logged by broadcast; an unreachable Redis holds no one up for longer than a prompt answer takes.
    await settledWithin(this.lastPublish, PROMPT_REDIS_MS);
  }

  /**
   * Never fails, and waits for Redis only before its first connection: the frame reaches this
   * process's sockets at once, and is handed to the other processes that listen when Redis is there.
   */
  async broadcast(topic: string, frame: string, except?: ServerWebSocket<unknown>) {
    deliverLocally(topic, frame, except);
    if (disconnected(this.publisher)) {
      this.fanOutFailed(new Error(`publisher ${this.publisher.status}`));
      return;
    }
    // Connected, the frame is handed on at the end of the turn: the caller (a socket's next
    // frame) does not wait for Redis's answer; one that must, asks handedOn.
    if (this.publisher.status === "ready") {
      this.enqueue(topic, frame);
      return;
    }
    // Still connecting for the first time: the caller waits, bounded, so frames keep their order.
    const published = this.publish(topic, [frame]);
    await withinRedis(this.publisher, "fan-out", () => published).catch((error: Error) => this.fanOutFailed(error));
  }

  private publish(topic: string, frames: string[]): Promise<unknown> {
    const script = onCluster() ? SHARDED_PUBLISH : PUBLISH;
    return this.publisher.eval(script, 1, this.interestKey(topic), this.node, this.channel(topic), ...frames);
  }

  /**
   * Frames of one topic leave in the order they were broadcast, in one script call per topic
   * and turn; the calls go out on the one connection, so a later turn's come after them.
   */
  private enqueue(topic: string, frame: string): void {
    if (!this.outgoing) {
      this.outgoing = new Map();
      // After the turn's promise callbacks, as ioredis sends its auto-pipelined commands.
      process.nextTick(this.sendOutgoing);
    }
    const frames = this.outgoing.get(topic);
    if (frames) frames.push(frame);
    else this.outgoing.set(topic, [frame]);
  }

  private flush(): void {
    const outgoing = this.outgoing;
    this.outgoing = undefined;
    if (!outgoing) return;
    const published: Promise<unknown>[] = [];
    for (const [topic, frames] of outgoing) {
      published.push(this.publish(topic, frames).catch((error: Error) => this.fanOutFailed(error)));
    }
    this.lastPublish = Promise.all(published);
  }

  /** Logged once per outage: every push would log it otherwise. */
  private fanOutFailed(error: Error): void {
    if (this.fanOutLost) return;
    this.fanOutLost = true;
    log.warn({ err: error.message }, "realtime: fan-out to other processes failed; delivering on this process only");
  }

  private fanOutBack(): void {
    if (this.fanOutLost) log.info("realtime: fan-out to other processes works again");
    this.fanOutLost = false;
  }

  /**
   * Waits for the SUBSCRIBE and SADD only while Redis is there
   * to answer; otherwise both are made good once Redis is back.
   */
  async subscribe(topic: string) {
    const subscriber = this.listen();
    const known = this.interest.get(topic);
    let ready: Promise<void>;
    if (known) {
      known.count++;
      // A second socket waits for the first one's SUBSCRIBE too, so it misses nothing either.
      ready = known.ready;
    } else {
      // Subscribed before announced: a publisher that sees this process in the set reaches it.
      const client = promptRedis();
      ready = channels
        .subscribe(subscriber, this.channel(topic))
        .then(() => withinRedis(client, "declaring interest", () => client.sadd(this.interestKey(topic), this.node)))
        .then(() => {
          // Housekeeping; the join need not wait for it.
          this.forgetDeadInterest(topic).catch((error: Error) =>
            log.warn({ err: error.message }, "realtime: could not prune a topic's interest"),
          );
        });
      ready.catch(() => {});
      this.interest.set(topic, { count: 1, ready });
    }
    // A subscriber still connecting is waited for only when Redis is known to answer.
    if (subscriber.status === "ready" || promptRedis().status === "ready") await settledWithin(ready, PROMPT_REDIS_MS);
  }

  /** Processes that died with sockets on the topic stay in its set until a join here drops them. */
  private async forgetDeadInterest(topic: string): Promise<void> {
    const client = promptRedis();
    const nodes = (
      await withinRedis(client, "pruning interest", () => client.smembers(this.interestKey(topic)))
    ).filter((node) => node !== this.node);
    if (nodes.length === 0) return;
    const alive = await withinRedis(client, "pruning interest", () => client.mget(...nodes.map(nodeKey)));
    const dead = nodes.filter((_, i) => alive[i] === null);
    if (dead.length > 0)
      await withinRedis(client, "pruning interest", () => client.srem(this.interestKey(topic), ...dead));
  }

  async unsubscribe(topic: string) {
    const known = this.interest.get(topic);
    if (!known) return;
    if (--known.count > 0) return;
    this.interest.delete(topic);
    // Both issued at once: a new join's SADD and SUBSCRIBE, issued later on the same connections, come after them.
    // A SREM lost to an outage only costs other processes a frame this one drops.
    const client = promptRedis();
    const forgotten = withinRedis(client, "withdrawing interest", () =>
      client.srem(this.interestKey(topic), this.node),
    );
    const subscriber = this.subscriber;
    const unsubscribed = subscriber
      ? settledWithin(
          channels.unsubscribe(subscriber, this.channel(topic)),
          disconnected(subscriber) ? 0 : PROMPT_REDIS_MS,
        )
      : undefined;
    await Promise.all([forgotten.catch(() => {}), unsubscribed]);
  }

  private presenceKey(topic: string): string {
    return redisKey("rt-presence", topic);
  }

  private async store(topic: string, entry: PresenceEntry): Promise<void> {
    await withinRedis(promptRedis(), "tracking presence", () =>
      promptRedis().hset(this.presenceKey(topic), entry.meta.phx_ref, JSON.stringify({ ...entry, node: this.node })),
    );
  }

  async track(topic: string, entry: PresenceEntry) {
    const byRef = this.tracked.get(topic) ?? new Map<string, PresenceEntry>();
    this.tracked.set(topic, byRef);
    byRef.set(entry.meta.phx_ref, entry);
    await this.store(topic, entry).catch((error: Error) =>
      log.warn({ err: error.message }, "realtime: presence kept on this process until Redis is back"),
    );
  }

  async untrack(topic: string, ref: string) {
    const byRef = this.tracked.get(topic);
    byRef?.delete(ref);
    if (byRef?.size === 0) this.tracked.delete(topic);
    // An entry left behind in Redis is dropped with this process's mark, or written over when it returns.
    await withinRedis(promptRedis(), "untracking presence", () =>
      promptRedis().hdel(this.presenceKey(topic), ref),
    ).catch(() => {});
  }

  /** Every process's entries; while Redis is away, this process's own. */
  async presence(topic: string) {
    try {
      return await this.presenceEverywhere(topic);
    } catch (error) {
      log.warn({ err: (error as Error).message }, "realtime: presence of other processes unavailable");
      return [...(this.tracked.get(topic)?.values() ?? [])];
    }
  }

  private async presenceEverywhere(topic: string): Promise<PresenceEntry[]> {
    const client = promptRedis();
    const stored = await withinRedis(client, "reading presence", () => client.hgetall(this.presenceKey(topic)));
    const entries = Object.entries(stored).map(([ref, json]) => ({
      ref,
      ...(JSON.parse(json) as PresenceEntry & { node: string }),
    }));
    const nodes = [...new Set(entries.map((entry) => entry.node))];
    if (nodes.length === 0) return [];
    const alive = await withinRedis(client, "reading presence", () => client.mget(...nodes.map(nodeKey)));
    const dead = new Set(nodes.filter((_, i) => alive[i] === null));
    // Entries of a process that died without cleaning up are dropped here, on the next read.
    const stale = entries.filter((entry) => dead.has(entry.node)).map((entry) => entry.ref);
    if (stale.length > 0)
      await withinRedis(client, "dropping stale presence", () => client.hdel(this.presenceKey(topic), ...stale));
    return entries.filter((entry) => !dead.has(entry.node)).map(({ key, meta }) => ({ key, meta }));
  }

  async close() {
    clearInterval(this.heartbeat);
    promptRedis().off("ready", this.onReady);
    this.publisher.off("ready", this.onPublisherReady);
    this.flush();
    const topics = [...this.interest.keys()];
    this.interest.clear();
    await closeClient(this.subscriber);
    this.subscriber = undefined;
    await closeClient(this.publisher);
    const client = promptRedis();
    const forgotten = () =>
      Promise.all([
        ...topics.map((topic) => client.srem(this.interestKey(topic), this.node)),
        client.del(nodeKey(this.node)),
      ]);
    await withinRedis(client, "forgetting this process", forgotten).catch(() => {});
  }
}
