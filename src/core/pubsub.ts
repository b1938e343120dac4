/**
 * Publish/subscribe between Parley's processes: short notices that something changed (an
 * outbox ring, an account's keys, a stop for a recorder), each read
 * again from the database by whoever needs the details. Delivery is best effort, at most
 * once, and only to subscriptions in place when a message is published; every user keeps a
 * fallback for a lost message (a poll, a cache TTL, a sweep, a job retry).
 * src/queue/redis-pubsub.ts serves it over Redis; LocalPubSub keeps every message in this process.
 *
 * The real-time broker (src/realtime/redis-broker.ts) keeps its own Redis connections instead of
 * sitting on this interface. Its fan-out is not a plain PUBLISH: one Lua script publishes
 * only when another process has declared interest in the topic (an interest set kept per
 * topic, restored after an outage), on a publisher connection of its own that pipelines
 * writes without waiting for answers, keeps one topic's frames in order, and drops frames
 * rather than queueing them while Redis is away. Giving this interface interest sets,
 * fire-and-forget sends and per-connection ordering for one user would make it the broker
 * under another name, so the notices here stay plain.
 */

/** `channel` is the name a message was published under, as the subscriber named it. */
export type OnMessage = (channel: string, message: string) => void;

export interface Subscription {
  /** Settles once the subscription is in place; rejects when it never will be (closed first). */
  readonly ready: Promise<void>;
  /** Waits for `ready` at most `ms`, and not at all while the bus is out of reach; never rejects. */
  settle(ms: number): Promise<void>;
  close(): Promise<void>;
}

export interface PubSub {
  /**
   * Hands `message` to every subscription of `channel`, in every process. Without `withinMs`
   * it waits for an unreachable bus to come back; with it, it fails at once while the bus is
   * out of reach and after `withinMs` without an answer (the message may still go out late).
   */
  publish(channel: string, message: string, options?: { withinMs?: number }): Promise<void>;
  /**
   * `name` says what the subscription is for (Redis names its connection after it).
   * `onRestored` runs each time the subscription is in place again after the bus was out of
   * reach: messages published meanwhile were lost, so a subscriber can look for itself.
   */
  subscribe(
    name: string,
    channels: string[],
    onMessage: OnMessage,
    options?: { onRestored?: () => void },
  ): Subscription;
}

/** Every message stays in this process: for a process with nobody else to tell, and for tests. */
export class LocalPubSub implements PubSub {
  private readonly handlers = new Map<string, Set<OnMessage>>();

  async publish(channel: string, message: string): Promise<void> {
    // Delivered after the publisher goes on, as a message through Redis would be.
    for (const handler of this.handlers.get(channel) ?? []) queueMicrotask(() => handler(channel, message));
  }

  subscribe(_name: string, channels: string[], onMessage: OnMessage): Subscription {
    // One handler per subscription, so the same function subscribed twice is told twice.
    const handler: OnMessage = (channel, message) => onMessage(channel, message);
    for (const channel of channels) {
      const handlers = this.handlers.get(channel) ?? new Set();
      this.handlers.set(channel, handlers);
      handlers.add(handler);
    }
    return {
      ready: Promise.resolve(),
      settle: async () => {},
      close: async () => {
        for (const channel of channels) {
          const handlers = this.handlers.get(channel);
          handlers?.delete(handler);
          if (handlers?.size === 0) this.handlers.delete(channel);
        }
      },
    };
  }
}
