/**
 * The live feed of a console page: its figures as server-sent events, sent again whenever they
 * change. A feed is woken by the outbox, like the event log's tail it follows (catalogue/stream.ts):
 * every stored change a page shows (a room, a call, a participant, a stream) records a catalogue
 * event for its account, whose ring wakes the feeds of that account and the feeds of every
 * account. The consumer's sweep wakes every feed every second, for a lost ring and for what is
 * no stored fact (the clock the series move with, the viewers counted in Redis).
 */
import { config } from "../../core/config";
import { AppError } from "../../core/errors";
import { log } from "../../core/log";
import { HeldResource } from "../limits";
import { followEvents } from "../catalogue";
import { overview, streamsView } from "./service";
import { sessionViewer, type Viewer } from "./sessions";

/** Feeds that ask for a view within this long of the start of its computation share it. */
const SHARED_FOR_MS = 1_000;
/** A feed computes its figures at most this often, however often it is rung. */
const MIN_GAP_MS = 250;
/**
 * A feed waits at least this many times as long as its view last took to compute: the overview runs
 * a week's usage report per account, which on a large deployment takes a good part of a second, and
 * the console should not spend more than a fifth of a core on it.
 */
const BACK_OFF = 4;
/** How often an open feed reads its session again, so logging out ends it too. */
const SESSION_EVERY_MS = 5_000;
/** A comment line this often keeps proxies from closing a feed whose figures stay the same. */
const KEEP_ALIVE_MS = 15_000;

/**
 * Open live feeds (docs/limits.md#caps): each holds a connection and a wake-up listener, and its
 * session is read from the database every few seconds, so a script with one session cookie
 * opening feeds by the thousand would fill the process.
 */
const feeds = new HeldResource({
  resource: "console_feeds",
  what: "console live feeds",
  perProcess: { name: "console_feeds.per_process", cap: () => config.limits.held.consoleFeedsPerProcess },
  callers: [
    {
      name: "console_feeds.per_session",
      per: "console session",
      cap: () => config.limits.held.consoleFeedsPerSession,
      refusal: 429,
    },
  ],
  retryAfterSeconds: 5,
  free: "close a console page",
});

/** One computation of a view's figures, shared by the feeds that ask for them meanwhile. */
class Computation {
  /** When it began: it shows every change committed before. */
  readonly began = Date.now();
  /** How long it took, in milliseconds. */
  took = 0;
  readonly snapshot: Promise<string>;

  constructor(key: string, compute: () => Promise<unknown>) {
    const started = performance.now();
    this.snapshot = compute().then(
      (value) => {
        this.took = performance.now() - started;
        return JSON.stringify(value);
      },
      (error: unknown) => {
        // A failed computation is not kept: the next feed to ask tries again.
        if (computations.get(key) === this) computations.delete(key);
        throw error;
      },
    );
  }
}

const computations = new Map<string, Computation>();

/**
 * A view's figures as JSON, computed once for every feed of the same view and account that asks
 * for figures no older than `since`: feeds woken by the same ring share one computation, however
 * many console pages are open. Answers the snapshot and how long its computation took.
 */
export async function sharedSnapshot(
  key: string,
  compute: () => Promise<unknown>,
  since = Date.now() - SHARED_FOR_MS,
): Promise<{ json: string; took: number }> {
  const now = Date.now();
  let current = computations.get(key);
  if (!current || current.began < since) {
    // Views of accounts no page has asked for in a while are dropped as new ones come.
    if (computations.size >= 1_000)
      for (const [old, kept] of computations) if (now - kept.began > 60_000) computations.delete(old);
    current = new Computation(key, compute);
    computations.set(key, current);
  }
  const json = await current.snapshot;
  return { json, took: current.took };
}

/** The figures of one page, for its live feed. */
const LIVE_VIEWS = {
  overview: async (accountId: string | undefined) => ({ overview: await overview(accountId) }),
  streams: async (accountId: string | undefined) => ({ streams: await streamsView(accountId) }),
};

/** What each view's feed sends, as the pages read it. */
export type LiveSnapshot = { [View in keyof typeof LIVE_VIEWS]: Awaited<ReturnType<(typeof LIVE_VIEWS)[View]>> };

export function liveFeed(
  request: Request,
  viewer: Viewer,
  accountId: string | undefined,
  view: keyof typeof LIVE_VIEWS,
): Response {
  const release = feeds.take([viewer.sessionId]);
  const encoder = new TextEncoder();
  let closed = false;
  let wake: (() => void) | undefined;
  // When the first ring not yet shown came: the next figures must be computed after it.
  let rungAt: number | undefined;
  // A ring ends the wait for one, not the pause that keeps a feed from computing too often.
  let awaitingRing = false;
  const unfollow = followEvents(accountId, () => {
    rungAt ??= Date.now();
    if (awaitingRing) wake?.();
  });
  const close = () => {
    if (closed) return;
    closed = true;
    unfollow();
    release();
    wake?.();
  };
  /** Until `ms` have passed or the feed closes. */
  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  const stream = new ReadableStream<Uint8Array>({
    async start(controller) {
      let last = "";
      let sentAt = Date.now();
      let sessionReadAt = Date.now();
      let since = Date.now() - SHARED_FOR_MS;
      try {
        while (!closed) {
          if (Date.now() - sessionReadAt >= SESSION_EVERY_MS) {
            await sessionViewer(viewer.sessionId);
            sessionReadAt = Date.now();
          }
          const began = Date.now();
          const { json: snapshot, took } = await sharedSnapshot(
            `${view}|${accountId ?? ""}`,
            () => LIVE_VIEWS[view](accountId),
            since,
          );
          if (closed) break;
          if (snapshot !== last) {
            last = snapshot;
            controller.enqueue(encoder.encode(`event: snapshot\ndata: ${snapshot}\n\n`));
            sentAt = Date.now();
          } else if (Date.now() - sentAt >= KEEP_ALIVE_MS) {
            controller.enqueue(encoder.encode(": still here\n\n"));
            sentAt = Date.now();
          }
          // Rings meanwhile are gathered: the next computation shows them all.
          await pause(Math.max(MIN_GAP_MS, BACK_OFF * took) - (Date.now() - began));
          awaitingRing = true;
          if (!closed && rungAt === undefined) await pause(KEEP_ALIVE_MS);
          awaitingRing = false;
          wake = undefined;
          since = rungAt ?? Date.now();
          rungAt = undefined;
        }
      } catch (error) {
        // The session ended, the viewer went away, or a dependency failed: the feed ends, and
        // the browser reconnects (or, refused, returns to the sign-in).
        if (!(error instanceof AppError) && !closed)
          log.warn({ err: (error as Error).message }, "console live feed ended");
      }
      if (!closed) {
        close();
        controller.close();
      }
    },
    cancel: close,
  });
  request.signal.addEventListener("abort", close);
  return new Response(stream, { headers: { "content-type": "text/event-stream", "cache-control": "no-store" } });
}
