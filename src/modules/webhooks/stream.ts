/**
 * The event log as Server-Sent Events. Each event is sent with `id:` its sequence number,
 * so a client that reconnects with Last-Event-ID resumes exactly after the last one it got.
 * The stream reads the database (the truth). It is woken by the outbox's "events-stream"
 * consumer, registered while this process has a stream open: a ring for the stream's account
 * from any process, and the consumer's sweep, which wakes every stream in case a ring was lost.
 */
import { EventEmitter } from "node:events";
import { eq } from "drizzle-orm";
import type { RegisteredConsumer } from "../../core/outbox";
import { db } from "../../db/client";
import { outbox } from "../../queue/outbox";
import type { EventType } from "./model";
import { EVENT_STREAMS_CONSUMER } from "./outbox";
import { listEvents } from "./service";
import { eventSequences } from "./schema";

/** How often every stream looks again, for an event whose ring was lost. */
const SWEEP_MS = 2_000;
/** A comment line this often keeps proxies from closing an idle stream. */
const HEARTBEAT_MS = 15_000;
const PAGE = 500;

async function latestSequence(accountId: string): Promise<number> {
  const [row] = await db
    .select({ last: eventSequences.lastSequence })
    .from(eventSequences)
    .where(eq(eventSequences.accountId, accountId));
  return Number(row?.last ?? 0);
}

/** This process's open streams, by account: each listens for its account's wake-ups. */
const streams = new EventEmitter().setMaxListeners(0);
let consumer: RegisteredConsumer | undefined;
let open = 0;

/**
 * Wakes `wake` for each ring of the account's events. The consumer is registered with the
 * process's first open stream and stopped with its last.
 */
function follow(accountId: string, wake: () => void): () => void {
  streams.on(accountId, wake);
  open++;
  consumer ??= outbox.register({
    name: EVENT_STREAMS_CONSUMER,
    sweepEveryMs: SWEEP_MS,
    async drain(due) {
      const accounts = due === "sweep" ? streams.eventNames() : [...due];
      for (const account of accounts) streams.emit(account);
      return accounts.length;
    },
  });
  return () => {
    streams.off(accountId, wake);
    if (--open > 0) return;
    void consumer?.stop();
    consumer = undefined;
  };
}

/** `release` gives back the stream's slot (limits/held.ts) once it ends, however it ends. */
export function eventStream(
  accountId: string,
  from: { after?: number; types?: EventType[] },
  signal: AbortSignal,
  release: () => void,
): Response {
  const encoder = new TextEncoder();
  let closed = false;
  let wake: (() => void) | undefined;
  // Rung while the stream was reading: it reads again instead of waiting.
  let rung = false;
  let unfollow: (() => void) | undefined;
  const close = () => {
    closed = true;
    release();
    unfollow?.();
    unfollow = undefined;
    wake?.();
  };
  signal.addEventListener("abort", close, { once: true });
  const body = new ReadableStream<Uint8Array>({
    async start(controller) {
      if (closed) return controller.close();
      unfollow = follow(accountId, () => {
        rung = true;
        wake?.();
      });
      let after = from.after ?? (await latestSequence(accountId));
      let lastWrite = Date.now();
      controller.enqueue(encoder.encode(": parley event stream\nretry: 1000\n\n"));
      try {
        while (!closed) {
          rung = false;
          const page = await listEvents(accountId, { after, types: from.types, limit: PAGE });
          // A filtered page may skip sequence numbers; the cursor still moves past what was read.
          for (const event of page.events) {
            controller.enqueue(
              encoder.encode(`id: ${event.sequence}\nevent: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`),
            );
            lastWrite = Date.now();
          }
          after = page.next_after;
          if (page.events.length === PAGE) continue;
          if (Date.now() - lastWrite >= HEARTBEAT_MS) {
            controller.enqueue(encoder.encode(": keep-alive\n\n"));
            lastWrite = Date.now();
          }
          if (rung) continue;
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, HEARTBEAT_MS);
            wake = () => {
              clearTimeout(timer);
              resolve();
            };
          });
          wake = undefined;
        }
      } catch {
        // The client went away mid-write, or the database is gone: end the stream; the client resumes.
      } finally {
        close();
        try {
          controller.close();
        } catch {}
      }
    },
    cancel: close,
  });
  return new Response(body, {
    headers: { "content-type": "text/event-stream", "cache-control": "no-cache", "x-accel-buffering": "no" },
  });
}
