/**
 * The event log's live tail, read by the Server-Sent Events stream and the socket's `events:`
 * topic alike. Each event is sent with its sequence number, so a client that reconnects with
 * Last-Event-ID (or joins with `after`) resumes exactly after the last one it got.
 * A tail reads the database (the truth). It is woken by the outbox's "events-stream" consumer,
 * registered while this process has a tail (or a console live feed) open: a ring for the tail's
 * account from any process, and the consumer's sweep, which wakes every tail in case a ring was lost.
 */
import { EventEmitter } from "node:events";
import { eq } from "drizzle-orm";
import type { RegisteredConsumer } from "../../core/outbox";
import { db } from "../../db/client";
import { outbox } from "../../outbox/outbox";
import type { EventType, PublicEvent } from "./model";
import { EVENT_STREAMS_CONSUMER } from "./record";
import { listEvents } from "./log";
import { eventSequences } from "./schema";

/**
 * How often every tail looks again, for an event whose ring was lost; a console live feed is
 * woken as often, for what no ring tells of (the clock, viewers counted in Redis).
 */
const SWEEP_MS = 1_000;
/** A comment line this often keeps proxies from closing an idle stream; a tail reads at least this often. */
const HEARTBEAT_MS = 15_000;
const PAGE = 500;

/** The account's latest sequence number: where a tail that asks for events "from now on" starts. */
export async function latestSequence(accountId: string): Promise<number> {
  const [row] = await db
    .select({ last: eventSequences.lastSequence })
    .from(eventSequences)
    .where(eq(eventSequences.accountId, accountId));
  return Number(row?.last ?? 0);
}

/** This process's open tails and other followers, by account: each listens for its account's wake-ups. */
const tails = new EventEmitter().setMaxListeners(0);
/** What a follower of every account listens on. */
const EVERY_ACCOUNT = Symbol("every account");
let consumer: RegisteredConsumer | undefined;
let open = 0;

/**
 * Wakes `wake` for each ring of the account's events (of any account's, without one), and on
 * each sweep of the consumer, every SWEEP_MS. The consumer is registered with the process's
 * first follower and stopped with its last. Answers the function that stops following.
 */
export function followEvents(accountId: string | undefined, wake: () => void): () => void {
  const on = accountId ?? EVERY_ACCOUNT;
  tails.on(on, wake);
  open++;
  consumer ??= outbox.register({
    name: EVENT_STREAMS_CONSUMER,
    sweepEveryMs: SWEEP_MS,
    async drain(due) {
      const accounts = due === "sweep" ? tails.eventNames() : [...due];
      for (const account of accounts) tails.emit(account);
      if (due !== "sweep" && due.size > 0) tails.emit(EVERY_ACCOUNT);
      return accounts.length;
    },
  });
  return () => {
    tails.off(on, wake);
    if (--open > 0) return;
    void consumer?.stop();
    consumer = undefined;
  };
}

/**
 * The account's events after the sequence `after`, page by page as they commit, until `signal`
 * aborts. A page may be empty: one comes at least every HEARTBEAT_MS, so a caller can show it is
 * alive. Throws when the database fails; the caller resumes from the last sequence it got.
 */
export async function* liveEvents(
  accountId: string,
  from: { after: number; types?: EventType[] },
  signal: AbortSignal,
): AsyncGenerator<PublicEvent[]> {
  let wake: (() => void) | undefined;
  // Rung while the tail was reading or its page being handled: it reads again instead of waiting.
  let rung = false;
  const ring = () => {
    rung = true;
    wake?.();
  };
  const unfollow = followEvents(accountId, ring);
  signal.addEventListener("abort", ring, { once: true });
  let after = from.after;
  try {
    while (!signal.aborted) {
      rung = false;
      const page = await listEvents(accountId, { after, types: from.types, limit: PAGE });
      // A filtered page may skip sequence numbers; the cursor still moves past what was read.
      after = page.next_after;
      yield page.events;
      if (page.events.length === PAGE || rung || signal.aborted) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, HEARTBEAT_MS);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wake = undefined;
    }
  } finally {
    signal.removeEventListener("abort", ring);
    unfollow();
  }
}

/** `release` gives back the stream's slot (eventStreams) once it ends, however it ends. */
export function eventStream(
  accountId: string,
  from: { after?: number; types?: EventType[] },
  signal: AbortSignal,
  release: () => void,
): Response {
  const encoder = new TextEncoder();
  const ended = new AbortController();
  const close = () => {
    release();
    ended.abort();
  };
  signal.addEventListener("abort", close, { once: true });
  const body = new ReadableStream<Uint8Array>({
    async start(controller) {
      try {
        if (ended.signal.aborted) return;
        const after = from.after ?? (await latestSequence(accountId));
        let lastWrite = Date.now();
        controller.enqueue(encoder.encode(": parley event stream\nretry: 1000\n\n"));
        for await (const events of liveEvents(accountId, { after, types: from.types }, ended.signal)) {
          for (const event of events) {
            controller.enqueue(
              encoder.encode(`id: ${event.sequence}\nevent: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`),
            );
            lastWrite = Date.now();
          }
          if (Date.now() - lastWrite >= HEARTBEAT_MS) {
            controller.enqueue(encoder.encode(": keep-alive\n\n"));
            lastWrite = Date.now();
          }
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
