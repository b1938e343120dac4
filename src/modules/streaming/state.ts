/**
 * Waiting for a stream's state. Every move of the row rings the outbox's "stream-states"
 * consumer (core/outbox) with the stream's id, in the transaction that makes it, so a request
 * or a worker waiting for the move, in any process, wakes once it has committed. The row
 * stays the truth: a waiter reads it again on each ring, and the consumer's sweep wakes every
 * waiter of the process for a ring that was lost (Redis away, say).
 */
import { EventEmitter } from "node:events";
import type { RegisteredConsumer } from "../../core/outbox";
import { outbox } from "../../outbox/outbox";
import { getStream, type Stream } from "./stream";

/** The outbox consumer that wakes the waiters of a stream's state (keys: stream ids). */
export const STREAM_STATES_CONSUMER = "stream-states";
/** How often every waiter reads its row again, for a move whose ring was lost. */
const SWEEP_MS = 500;

/**
 * Rings the waiters of the stream once `tx` commits: call it with the transaction handle that
 * moved the row (the global handle rings at once, for a move made by one statement).
 */
export function ringState(tx: object, streamId: string): void {
  outbox.ring(tx, STREAM_STATES_CONSUMER, [streamId]);
}

/** This process's waiters, by stream id. */
const waiters = new EventEmitter().setMaxListeners(0);
/**
 * Registered with the process's first wait and kept until stopStateSubscriber: its doorbell
 * across processes is a Redis connection, not worth making again for each request.
 */
let consumer: RegisteredConsumer | undefined;

function registered(): RegisteredConsumer {
  consumer ??= outbox.register({
    name: STREAM_STATES_CONSUMER,
    sweepEveryMs: SWEEP_MS,
    async drain(due) {
      const streams = due === "sweep" ? waiters.eventNames() : [...due];
      for (const streamId of streams) waiters.emit(streamId);
      return streams.length;
    },
  });
  return consumer;
}

export async function stopStateSubscriber(): Promise<void> {
  const registration = consumer;
  consumer = undefined;
  await registration?.stop();
}

/** Waits until the stream satisfies `done` or the time is up; answers the last row seen. */
export async function waitForStream(
  streamId: string,
  done: (stream: Stream) => boolean,
  timeoutMs: number,
): Promise<Stream> {
  const deadline = Date.now() + timeoutMs;
  let wake: (() => void) | undefined;
  // Rung while the row was being read: it is read again instead of waited on.
  let rung = false;
  const ring = () => {
    rung = true;
    wake?.();
  };
  waiters.on(streamId, ring);
  try {
    // In place before the first read (bounded, and not waited for while Redis is away), so a
    // move committed in another process after that read rings this waiter.
    await registered().ready;
    for (;;) {
      rung = false;
      const stream = await getStream(streamId);
      if (!stream || done(stream) || Date.now() >= deadline) return stream!;
      if (rung) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.max(0, deadline - Date.now()));
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wake = undefined;
    }
  } finally {
    waiters.off(streamId, ring);
  }
}
