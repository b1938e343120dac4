/** The one place Redis connections are made: commands, subscriptions and BullMQ all come from here. */
import { type ChainableCommander, Cluster, Redis, type RedisOptions } from "ioredis";
import { config } from "../core/config";
import { log } from "../core/log";

/**
 * A connection to Redis: one server (or the master Sentinel names), or a Redis Cluster with
 * REDIS_CLUSTER_NODES. Both take the same commands; on a Cluster, the keys of one command,
 * script, transaction or pipeline must share a slot (see tagged).
 */
export type RedisClient = Redis | Cluster;

/** Whether Redis is a Cluster: keys are then hash-tagged and pub/sub is sharded. */
export function onCluster(): boolean {
  return config.redis.clusterNodes.length > 0;
}

/** `options` replace the defaults, e.g. for a connection that must fail fast instead of queueing. */
export function createRedis(purpose: string, options: RedisOptions = {}): RedisClient {
  const perNode: RedisOptions = {
    connectionName: `parley:${purpose}`,
    // BullMQ requires null here so blocking commands are never cut short.
    maxRetriesPerRequest: null,
    lazyConnect: false,
    // ioredis waits up to 2 s between attempts by default, so after an outage each connection of
    // each process came back at its own moment up to 2 s after Redis did, and a request could
    // meet one still away. An attempt is one refused TCP connect: trying every half second is cheap.
    retryStrategy: (attempts: number) => Math.min(attempts * 50, RECONNECT_AT_MOST_MS),
    ...options,
  };
  const client = onCluster()
    ? clusterClient(perNode)
    : new Redis(config.redis.url, { ...sentinelOptions(), ...perNode });
  // ioredis reconnects by itself. The listener turns its errors from unhandled ones into one line
  // per outage and connection (not one per attempt, two a second), and one when it is back; the
  // first connection of the process to lose Redis says at warn which setting and address, and
  // what works meanwhile, the others at debug.
  let lostAt: number | undefined;
  client.on("error", (error: Error) => {
    const connected = client.status === "ready";
    if (!connected && lostAt !== undefined) return;
    if (!connected) lostAt = Date.now();
    if (outage) {
      log.debug({ redis: purpose, err: error.message }, "Redis connection error");
      return;
    }
    outage = true;
    const { setting, address } = redisAddress();
    log.warn(
      { redis: purpose, setting, address, err: error.message },
      `Redis at ${setting} ${address} cannot be reached (${error.message}); trying again every 0.5 s. Meanwhile ` +
        "tokens, scheduling, the mapper, chat on this process, uploads, usage reports and the console work; " +
        "recordings, viewer counts and fan-out to other processes wait for it (docs/fault-injection.md#redis-down)",
    );
  });
  client.on("ready", () => {
    if (lostAt === undefined) return;
    log.info({ redis: purpose, awayMs: Date.now() - lostAt }, "Redis connection back");
    lostAt = undefined;
    if ([...made].every((other) => other.status === "ready")) outage = false;
  });
  made.add(client);
  client.once("end", () => made.delete(client));
  return client;
}

/**
 * With REDIS_SENTINELS, each connection (and each one BullMQ duplicates from it) asks the
 * sentinels for the master at every (re)connection and checks the server it reaches is one,
 * so after a failover it finds the promoted replica by itself, without a restart.
 */
function sentinelOptions(): RedisOptions {
  const { sentinels, sentinelName } = config.redis;
  if (sentinels.length === 0) return {};
  return {
    sentinels,
    name: sentinelName,
    // A master that still answers when it is demoted (a manual failover, a partition healed) is
    // told by Sentinel to drop its clients, and refuses writes meanwhile: a READONLY answer makes
    // the connection ask the sentinels again. ioredis's failoverDetector is left off: its
    // +switch-master arriving while a connection is already reconnecting ends that connection for good.
    reconnectOnError: (error: Error) => error.message.startsWith("READONLY"),
    // Asked between attempts when no sentinel answers; spaced like attempts to Redis itself.
    sentinelRetryStrategy: (attempts: number) => Math.min(attempts * 50, RECONNECT_AT_MOST_MS),
    // rediss: in REDIS_URL keeps TLS to the master Sentinel names (the sentinels are asked in plain).
    enableTLSForSentinelMode: config.redis.url.startsWith("rediss:"),
  };
}

/**
 * A Cluster client: REDIS_URL lends its credentials and TLS. The per-node options apply to the
 * connection to each node; those that concern the whole client are given to it too.
 */
function clusterClient(perNode: RedisOptions): Cluster {
  const url = new URL(config.redis.url);
  return new Cluster(config.redis.clusterNodes, {
    redisOptions: {
      ...perNode,
      ...(url.username ? { username: decodeURIComponent(url.username) } : {}),
      ...(url.password ? { password: decodeURIComponent(url.password) } : {}),
      ...(url.protocol === "rediss:" ? { tls: {} } : {}),
    },
    enableOfflineQueue: perNode.enableOfflineQueue ?? true,
    enableAutoPipelining: perNode.enableAutoPipelining ?? false,
    lazyConnect: false,
    // Asked again, spaced like attempts to one server, when no seed node answers.
    clusterRetryStrategy: (attempts: number) => Math.min(attempts * 50, RECONNECT_AT_MOST_MS),
    // While the cluster elects a replica in place of a lost primary, its slots answer CLUSTERDOWN
    // or point at the dead node: commands are tried again this often until the promotion is seen.
    retryDelayOnClusterDown: 100,
    retryDelayOnFailover: 100,
    retryDelayOnTryAgain: 100,
    // A lost primary is replaced within the cluster's node timeout, a second or two: the default
    // 16 redirections at 100 ms are not enough to outlast it.
    maxRedirections: 100,
    // SSUBSCRIBE reaches the node that holds each channel's slot (docs/scaling.md#redis-cluster).
    shardedSubscribers: true,
  });
}

/** Whether this process has said that Redis is away (once an outage, whichever connection noticed first). */
let outage = false;

/** The setting that names Redis, and its address without credentials. */
function redisAddress(): { setting: string; address: string } {
  const { sentinels, sentinelName, url, clusterNodes } = config.redis;
  if (clusterNodes.length > 0)
    return {
      setting: "REDIS_CLUSTER_NODES",
      address: clusterNodes.map(({ host, port }) => `${host}:${port}`).join(","),
    };
  if (sentinels.length > 0)
    return {
      setting: "REDIS_SENTINELS",
      address: `${sentinels.map(({ host, port }) => `${host}:${port}`).join(",")} (master ${sentinelName})`,
    };
  // An absolute path is a Unix socket (the private Redis's), which is no URL.
  if (url.startsWith("/")) return { setting: "REDIS_URL", address: `the Unix socket ${url}` };
  const parsed = new URL(url);
  return { setting: "REDIS_URL", address: `${parsed.protocol}//${parsed.host}${parsed.pathname}` };
}

/** The longest wait between two attempts to reach a Redis that is away. */
const RECONNECT_AT_MOST_MS = 500;

/** Every connection this process made, until it ends. */
const made = new Set<RedisClient>();

/**
 * For a process that is stopping: every connection that has lost Redis stops reconnecting,
 * and the commands waiting for it (which would wait until Redis is back) fail at once with
 * "Connection is closed.", as do any made later. So a stop never waits on a Redis that is gone.
 * ioredis's own disconnect() leaves a reconnecting connection's waiting commands pending.
 */
export function abandonLostConnections(): number {
  let abandoned = 0;
  for (const client of made) {
    if (!disconnected(client)) continue;
    client.disconnect();
    // ioredis rejects every new command on a connection marked ended (BullMQ marks its own the
    // same way) and has no public call to reject the waiting ones: flushQueue is what its own
    // close handler uses, typed private (ioredis 6).
    client.status = "end";
    (client as unknown as { flushQueue?: (error: Error) => void }).flushQueue?.(new Error("Connection is closed."));
    made.delete(client);
    abandoned++;
  }
  return abandoned;
}

/** How long work that a client waits on gives Redis to answer before it is told Redis is down. */
export const PROMPT_REDIS_MS = 1_000;

/** Raised when Redis is not connected or did not answer within the bound (a dependency outage, 503). */
export class RedisUnavailable extends Error {
  readonly code = "REDIS_UNAVAILABLE";
  constructor(what: string) {
    super(`Redis is unavailable: ${what}`);
  }
}

/** A connection that has lost Redis keeps new commands in memory until Redis is back; these states say so. */
export function disconnected(client: RedisClient): boolean {
  return ["reconnecting", "close", "end"].includes(client.status);
}

/**
 * Runs a step that needs `client`: fails at once when the connection is lost, and after `ms`
 * when Redis does not answer. A command given up this way may still reach Redis once the
 * connection returns, so the steps bounded here are safe to run late.
 */
export async function withinRedis<T>(
  client: RedisClient,
  what: string,
  step: () => Promise<T>,
  ms = PROMPT_REDIS_MS,
): Promise<T> {
  if (disconnected(client)) throw new RedisUnavailable(`${what}: not connected`);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new RedisUnavailable(`${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([step(), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves when `promise` settles or `ms` have passed, whichever is first; never rejects. */
export async function settledWithin(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([
    promise.then(
      () => {},
      () => {},
    ),
    new Promise<void>((resolve) => (timer = setTimeout(resolve, ms))),
  ]);
  clearTimeout(timer);
}

/**
 * Closes a connection without waiting on a Redis that is gone:
 * QUIT when it answers in time, else the socket is dropped.
 */
export async function closeClient(client: RedisClient | undefined, ms = PROMPT_REDIS_MS): Promise<void> {
  if (!client) return;
  if (client.status !== "ready") {
    client.disconnect();
    return;
  }
  await settledWithin(client.quit(), ms);
  // Still open when QUIT got no answer in time.
  client.disconnect();
}

let shared: RedisClient | undefined;
let prompt: RedisClient | undefined;

/** The process-wide command connection (not for SUBSCRIBE or blocking reads); commands wait for Redis. */
export function redis(): RedisClient {
  shared ??= createRedis("commands");
  return shared;
}

/**
 * The command connection for work a client is waiting on (requests, socket pushes): a command
 * fails after PROMPT_REDIS_MS without an answer, and at the next failed reconnection attempt
 * when Redis is away, so a Redis outage costs a request at most that. Commands made before
 * the first connection wait for it (within the same bound). Wrap calls in withinRedis to
 * fail at once while the connection is lost.
 */
export function promptRedis(): RedisClient {
  prompt ??= createRedis("prompt", { maxRetriesPerRequest: 0, commandTimeout: PROMPT_REDIS_MS });
  return prompt;
}

/** Prefixes a key so several deployments can share one Redis. */
export function redisKey(...parts: (string | number)[]): string {
  return [config.redis.keyPrefix, ...parts].join(":");
}

/**
 * A part of a key that decides its slot on a Cluster: `{part}` there, so keys that one script,
 * transaction or pipeline touches together share a slot; the part unchanged on one server,
 * whose keys stay as they were.
 */
export function tagged(part: string): string {
  return onCluster() ? `{${part}}` : part;
}

/** The part back from a channel or key that tagged wrapped. */
export function untagged(part: string): string {
  return onCluster() && part.startsWith("{") && part.endsWith("}") ? part.slice(1, -1) : part;
}

/**
 * Pub/sub that works on both: on a Cluster, SPUBLISH/SSUBSCRIBE (Redis 7), so a message goes to
 * the shard that holds its channel's slot rather than to every node of the cluster.
 */
export const channels = {
  publish: (client: RedisClient, channel: string, message: string): Promise<unknown> =>
    onCluster() ? client.spublish(channel, message) : client.publish(channel, message),
  /** The same, as one command of a pipeline or transaction. */
  publishIn: (pipeline: ChainableCommander, channel: string, message: string): void => {
    if (onCluster()) pipeline.spublish(channel, message);
    else pipeline.publish(channel, message);
  },
  subscribe: async (client: RedisClient, ...names: string[]) => {
    // One SSUBSCRIBE per channel: the channels of one command must share a slot.
    if (onCluster()) await Promise.all(names.map((name) => client.ssubscribe(name)));
    else await client.subscribe(...names);
  },
  unsubscribe: async (client: RedisClient, ...names: string[]) => {
    if (onCluster()) await Promise.all(names.map((name) => client.sunsubscribe(name)));
    else await client.unsubscribe(...names);
  },
  /** Calls `listener` with each message's channel and text. */
  onMessage: (client: RedisClient, listener: (channel: string, message: string) => void) => {
    client.on(onCluster() ? "smessage" : "message", listener);
  },
};

export async function pingRedis(): Promise<void> {
  await promptRedis().ping();
}

export async function closeRedis(): Promise<void> {
  await Promise.all([closeClient(shared), closeClient(prompt)]);
  shared = undefined;
  prompt = undefined;
}
