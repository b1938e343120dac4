/** The live feed of the overview and streams pages, and the views it carries. */
import { query } from "./api";
import type { PageContext } from "./page";

export interface OverviewData {
  now: { rooms_open: number; participants: number; streams: { starting: number; running: number; stopping: number }; sip_calls: number; viewers: number };
  series: { times: number[]; participants: number[]; streams: number[]; calls: number[] };
  failures: Array<{ at: string; account_id: string; kind: string; room: string; subject: string; reason: string }>;
}

interface LiveViews {
  overview: { overview: OverviewData };
  streams: { streams: StreamView[] };
}

/** The live feed of the overview and streams pages: one snapshot whenever something changed. */
export function liveFeed<View extends keyof LiveViews>(context: PageContext, view: View, onSnapshot: (snapshot: LiveViews[View]) => void): void {
  const source = new EventSource(`/console/api/live${query({ account: context.account, view })}`);
  source.addEventListener("snapshot", (event) => onSnapshot(JSON.parse((event as MessageEvent).data)));
  // The browser retries a dropped feed by itself; one refused outright (the session ended) is
  // closed for good, and a reload shows the sign-in, or reopens the feed if the session is fine.
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED) location.reload();
  });
  context.onLeave(() => source.close());
}

export interface StreamView {
  id: string;
  account_id: string;
  room: string;
  stream_name: string;
  state: string;
  reason: string | null;
  created_at: string;
  viewers: number;
  peak_viewers: number;
  hls_url: string;
  vod_url: string;
}
