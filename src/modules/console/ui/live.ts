/** The live feed of the overview and streams pages; a snapshot's type is what the server's feed sends. */
import type { LiveSnapshot } from "../live";
import { query, type Wire } from "./api";
import type { PageContext } from "./page";

export type StreamView = Wire<LiveSnapshot["streams"]>["streams"][number];

/** The live feed of the overview and streams pages: one snapshot whenever something changed. */
export function liveFeed<View extends keyof LiveSnapshot>(
  context: PageContext,
  view: View,
  onSnapshot: (snapshot: Wire<LiveSnapshot[View]>) => void,
): void {
  const source = new EventSource(`/console/api/live${query({ account: context.account, view })}`);
  source.addEventListener("snapshot", (event) => onSnapshot(JSON.parse((event as MessageEvent).data)));
  // The browser retries a dropped feed by itself; one refused outright (the session ended) is
  // closed for good, and a reload shows the sign-in, or reopens the feed if the session is fine.
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED) location.reload();
  });
  context.onLeave(() => source.close());
}
