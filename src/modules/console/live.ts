/** The live feed of a console page: its figures as server-sent events, sent again whenever they change. */
import { config } from "../../config";
import { AppError } from "../../core/errors";
import { log } from "../../core/log";
import { HeldResource } from "../limits/held";
import { overview, streamsView } from "./service";
import { sessionViewer, type Viewer } from "./sessions";

/** How often the live feed looks for changes: well inside the 2 seconds the pages promise. */
const LIVE_TICK_MS = 1_000;
/**
 * A feed waits at least this many times as long as its view last took to compute: the overview runs
 * a week's usage report per account, which on a large deployment takes a good part of a second, and
 * the console should not spend more than a fifth of a core on it.
 */
const BACK_OFF = 4;

/**
 * Open live feeds (docs/limits.md#caps): each holds a connection and a timer, and its session is
 * read from the database every few seconds, so a script with one session cookie opening feeds
 * by the thousand would fill the process.
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
  /** When it ended (while it runs, when it began). */
  at = Date.now();
  /** How long it took, in milliseconds. */
  took = 0;
  running = true;
  readonly snapshot: Promise<string>;

  constructor(key: string, compute: () => Promise<unknown>) {
    const started = performance.now();
    this.snapshot = compute().then(
      (value) => {
        this.running = false;
        this.at = Date.now();
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
 * while a computation is under way or within LIVE_TICK_MS after it ended: however many console
 * pages are open, the figures are computed once a tick, not once a tick per page. Answers the
 * snapshot and how long its computation took.
 */
export async function sharedSnapshot(
  key: string,
  compute: () => Promise<unknown>,
): Promise<{ json: string; took: number }> {
  const now = Date.now();
  let current = computations.get(key);
  if (!current || (!current.running && now - current.at >= LIVE_TICK_MS)) {
    // Views of accounts no page has asked for in a while are dropped as new ones come.
    if (computations.size >= 1_000)
      for (const [old, kept] of computations) if (!kept.running && now - kept.at > 60_000) computations.delete(old);
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
  let timer: ReturnType<typeof setTimeout> | undefined;
  let closed = false;
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      let last = "";
      let ticks = 0;
      const tick = async () => {
        if (closed) return;
        try {
          // The session is read again every few seconds: logging out ends an open feed too.
          if (ticks++ % 5 === 4) await sessionViewer(viewer.sessionId);
          const { json: snapshot, took } = await sharedSnapshot(`${view}|${accountId ?? ""}`, () =>
            LIVE_VIEWS[view](accountId),
          );
          if (snapshot !== last) {
            last = snapshot;
            controller.enqueue(encoder.encode(`event: snapshot\ndata: ${snapshot}\n\n`));
          } else if (ticks % 15 === 0) {
            controller.enqueue(encoder.encode(": still here\n\n"));
          }
          timer = setTimeout(tick, Math.max(LIVE_TICK_MS, BACK_OFF * took));
        } catch (error) {
          // The session ended, the viewer went away, or a dependency failed: the feed ends, and
          // the browser reconnects (or, refused, returns to the sign-in).
          if (!(error instanceof AppError) && !closed)
            log.warn({ err: (error as Error).message }, "console live feed ended");
          if (!closed) {
            closed = true;
            release();
            controller.close();
          }
        }
      };
      void tick();
    },
    cancel() {
      closed = true;
      release();
      clearTimeout(timer);
    },
  });
  request.signal.addEventListener("abort", () => {
    closed = true;
    release();
    clearTimeout(timer);
  });
  return new Response(stream, { headers: { "content-type": "text/event-stream", "cache-control": "no-store" } });
}
