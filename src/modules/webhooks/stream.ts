/**
 * The event log as Server-Sent Events. Each event is sent with `id:` its sequence number,
 * so a client that reconnects with Last-Event-ID resumes exactly after the last one it got.
 * The stream reads the database (the truth), woken at once by commits in this process and
 * polling for those of other processes.
 */
import { eq } from "drizzle-orm";
import { db } from "../../db/client";
import type { EventType } from "./model";
import { committedEvents } from "./outbox";
import { listEvents } from "./service";
import { eventSequences } from "./schema";

/** How often a stream looks for events committed by another process. */
const POLL_MS = 500;
/** A comment line this often keeps proxies from closing an idle stream. */
const HEARTBEAT_MS = 15_000;
const PAGE = 500;

async function latestSequence(accountId: string): Promise<number> {
  const [row] = await db.select({ last: eventSequences.lastSequence }).from(eventSequences).where(eq(eventSequences.accountId, accountId));
  return Number(row?.last ?? 0);
}

export function eventStream(accountId: string, from: { after?: number; types?: EventType[] }, signal: AbortSignal): Response {
  const encoder = new TextEncoder();
  let closed = false;
  let wake: (() => void) | undefined;
  const onCommit = () => wake?.();
  const close = () => {
    closed = true;
    committedEvents.off(accountId, onCommit);
    wake?.();
  };
  signal.addEventListener("abort", close, { once: true });
  const body = new ReadableStream<Uint8Array>({
    async start(controller) {
      committedEvents.on(accountId, onCommit);
      let after = from.after ?? (await latestSequence(accountId));
      let lastWrite = Date.now();
      controller.enqueue(encoder.encode(": parley event stream\nretry: 1000\n\n"));
      try {
        while (!closed) {
          const page = await listEvents(accountId, { after, types: from.types, limit: PAGE });
          // A filtered page may skip sequence numbers; the cursor still moves past what was read.
          for (const event of page.events) {
            controller.enqueue(encoder.encode(`id: ${event.sequence}\nevent: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`));
            lastWrite = Date.now();
          }
          after = page.next_after;
          if (page.events.length === PAGE) continue;
          if (Date.now() - lastWrite >= HEARTBEAT_MS) {
            controller.enqueue(encoder.encode(": keep-alive\n\n"));
            lastWrite = Date.now();
          }
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, POLL_MS);
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
  return new Response(body, { headers: { "content-type": "text/event-stream", "cache-control": "no-cache", "x-accel-buffering": "no" } });
}
