/** Publish/subscribe (core/pubsub) over Redis, and the slot of the one the process uses. */
import { installed } from "../core/installed";
import type { OnMessage, PubSub, Subscription } from "../core/pubsub";
import {
  channels as shardable,
  closeClient,
  createRedis,
  disconnected,
  redis,
  redisKey,
  settledWithin,
  withinRedis,
} from "./connection";

/**
 * Channels are prefixed like keys, so deployments sharing a Redis do not hear each other.
 * Publishes go on the process's command connection; each subscription has a connection of its
 * own (a subscribed connection takes no other command), which ioredis subscribes again after
 * every reconnection. On a Cluster the channels are sharded (SSUBSCRIBE), each on its slot's shard.
 */
export const redisPubSub: PubSub = {
  async publish(channel, message, options = {}) {
    const client = redis();
    const publish = () => shardable.publish(client, redisKey(channel), message);
    await (options.withinMs === undefined
      ? publish()
      : withinRedis(client, `publishing on ${channel}`, publish, options.withinMs));
  },

  subscribe(name: string, channels: string[], onMessage: OnMessage, options = {}): Subscription {
    const client = createRedis(name);
    const prefix = redisKey("");
    shardable.onMessage(client, (channel, message) => onMessage(channel.slice(prefix.length), message));
    const { onRestored } = options;
    // "ready" comes once per connection; the first is the subscription starting, not a return.
    if (onRestored) client.once("ready", () => client.on("ready", onRestored));
    const ready = shardable.subscribe(client, ...channels.map((channel) => redisKey(channel)));
    // Callers that never wait on it leave the missing subscription to their fallback.
    ready.catch(() => {});
    return {
      ready,
      async settle(ms) {
        if (!disconnected(client)) await settledWithin(ready, ms);
      },
      close: () => closeClient(client),
    };
  },
};

/**
 * The process's publish/subscribe, chosen by its composition root (src/process/root.ts): Redis,
 * or LocalPubSub where every role runs in one process.
 */
export const pubsub = installed<PubSub>("the process's publish/subscribe");

export function usePubSub(bus: PubSub | undefined): void {
  pubsub.install(bus);
}
