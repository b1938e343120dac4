/** The live feed of the overview and streams pages; a snapshot's type is what the server's feed sends. */
import type { LiveSnapshot } from "../live";
import { api, query, type Wire } from "./api";
import type { PageContext } from "./page";

export type StreamView = Wire<LiveSnapshot["streams"]>["streams"][number];

/** How long a page waits to ask again for a feed refused while its session is good: the cap's Retry-After. */
const REFUSED_RETRY_MS = 5_000;

/** The live feed of the overview and streams pages: one snapshot whenever something changed. */
export function liveFeed<View extends keyof LiveSnapshot>(
  context: PageContext,
  view: View,
  onSnapshot: (snapshot: Wire<LiveSnapshot[View]>) => void,
): void {
  let source: EventSource | undefined;
  let retry: ReturnType<typeof setTimeout> | undefined;
  let left = false;
  const open = () => {
    const opened = new EventSource(`/console/api/live${query({ account: context.account, view })}`);
    source = opened;
    opened.addEventListener("snapshot", (event) => onSnapshot(JSON.parse((event as MessageEvent).data)));
    // The browser retries a dropped feed by itself; one refused outright is closed for good. With
    // the session ended, a reload shows the sign-in. With the session good, the refusal was the
    // cap on open feeds (other tabs hold them): reloading would be refused again at once, over
    // and over, so the feed is asked for again a while later instead.
    opened.addEventListener("error", async () => {
      if (opened.readyState !== EventSource.CLOSED) return;
      const session = await api("get", "/session").catch(() => undefined);
      if (left) return;
      if (session?.signed_in) retry = setTimeout(open, REFUSED_RETRY_MS);
      else location.reload();
    });
  };
  open();
  context.onLeave(() => {
    left = true;
    clearTimeout(retry);
    source?.close();
  });
}
