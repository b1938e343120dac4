/**
 * Every change of a stream's state is announced (core/pubsub) so a request waiting for it,
 * on any process, wakes at once; the row stays the truth, polled meanwhile.
 */
import { log } from "../../core/log";
import type { Subscription } from "../../core/pubsub";
import { PROMPT_REDIS_MS } from "../../queue/connection";
import { pubsub } from "../../queue/redis-pubsub";
import { getStream, type Stream } from "./stream";

const STATE_CHANNEL = "streams:state";
let stateSubscription: Subscription | undefined;
const stateWaiters = new Map<string, Set<() => void>>();

/** Best effort: the row is the truth, and a waiter that misses the announcement finds the change on its next poll. */
export async function announce(streamId: string): Promise<void> {
  await pubsub()
    .publish(STATE_CHANNEL, streamId, { withinMs: PROMPT_REDIS_MS })
    .catch((error: Error) => log.warn({ streamId, err: error.message }, "stream state change not announced"));
}

/**
 * Waits for the subscription at most PROMPT_REDIS_MS, and not at all while Redis is away: it
 * is made once Redis is back, and waiters poll the row meanwhile. A subscription that fails
 * (the connection dropped at shutdown) leaves the waiters to their poll.
 */
async function subscribeToStates(): Promise<void> {
  stateSubscription ??= pubsub().subscribe("stream-states", [STATE_CHANNEL], (_channel, streamId) => {
    for (const wake of stateWaiters.get(streamId) ?? []) wake();
  });
  await stateSubscription.settle(PROMPT_REDIS_MS);
}

export async function stopStateSubscriber(): Promise<void> {
  const subscription = stateSubscription;
  stateSubscription = undefined;
  await subscription?.close();
}

/** Waits until the stream satisfies `done` or the time is up; answers the last row seen. */
export async function waitForStream(
  streamId: string,
  done: (stream: Stream) => boolean,
  timeoutMs: number,
): Promise<Stream> {
  await subscribeToStates();
  const deadline = Date.now() + timeoutMs;
  let wake: () => void = () => {};
  const waiters = stateWaiters.get(streamId) ?? new Set();
  stateWaiters.set(streamId, waiters);
  const waker = () => wake();
  waiters.add(waker);
  try {
    for (;;) {
      const stream = await getStream(streamId);
      if (!stream || done(stream) || Date.now() >= deadline) return stream!;
      // The announcement wakes us at once; the poll covers a message lost with a dropped connection.
      await new Promise<void>((resolve) => {
        wake = resolve;
        setTimeout(resolve, Math.min(500, Math.max(0, deadline - Date.now())));
      });
    }
  } finally {
    waiters.delete(waker);
    if (waiters.size === 0) stateWaiters.delete(streamId);
  }
}
