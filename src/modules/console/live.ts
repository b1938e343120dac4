/** The live feed of a console page: its figures as server-sent events, sent again whenever they change. */
import { AppError } from "../../core/errors";
import { log } from "../../core/log";
import { overview, streamsView } from "./service";
import { sessionViewer, type Viewer } from "./sessions";

/** How often the live feed looks for changes: well inside the 2 seconds the pages promise. */
const LIVE_TICK_MS = 1_000;

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
          const snapshot = JSON.stringify(await LIVE_VIEWS[view](accountId));
          if (snapshot !== last) {
            last = snapshot;
            controller.enqueue(encoder.encode(`event: snapshot\ndata: ${snapshot}\n\n`));
          } else if (ticks % 15 === 0) {
            controller.enqueue(encoder.encode(": still here\n\n"));
          }
          timer = setTimeout(tick, LIVE_TICK_MS);
        } catch (error) {
          // The session ended, the viewer went away, or a dependency failed: the feed ends, and
          // the browser reconnects (or, refused, returns to the sign-in).
          if (!(error instanceof AppError) && !closed)
            log.warn({ err: (error as Error).message }, "console live feed ended");
          if (!closed) {
            closed = true;
            controller.close();
          }
        }
      };
      void tick();
    },
    cancel() {
      closed = true;
      clearTimeout(timer);
    },
  });
  request.signal.addEventListener("abort", () => {
    closed = true;
    clearTimeout(timer);
  });
  return new Response(stream, { headers: { "content-type": "text/event-stream", "cache-control": "no-store" } });
}
