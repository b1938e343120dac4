/** Now, the last 24 hours as small charts, and recent failures; kept current by the live feed. */
import { roomLabel } from "../../../../core/room-key";
import { timeChart } from "../charts";
import { h, table, when } from "../dom";
import { liveFeed } from "../live";
import { accountName, type PageContext } from "../page";

function figure(label: string, value: number, name: string): HTMLElement {
  return h("div", { class: "figure" }, h("dt", {}, label), h("dd", { "data-figure": name }, value));
}

export function overviewPage(root: HTMLElement, context: PageContext): void {
  const body = h("div", { class: "overview", "aria-busy": "true" });
  root.append(body);
  liveFeed(context, "overview", ({ overview }) => {
    const { now, series, failures } = overview;
    body.removeAttribute("aria-busy");
    body.replaceChildren(
      h("h2", {}, "Now"),
      h(
        "dl",
        { class: "figures" },
        figure("Rooms open", now.rooms_open, "rooms_open"),
        figure("Participants", now.participants, "participants"),
        figure("Streams starting", now.streams.starting, "streams_starting"),
        figure("Streams running", now.streams.running, "streams_running"),
        figure("Streams stopping", now.streams.stopping, "streams_stopping"),
        figure("Phone calls", now.sip_calls, "sip_calls"),
        figure("Viewers", now.viewers, "viewers"),
      ),
      h("h2", {}, "Last 24 hours"),
      h(
        "div",
        { class: "charts" },
        timeChart(
          "overview-participants",
          "Participants",
          series.times,
          [{ label: "Participants", values: series.participants }],
          { height: 140 },
        ),
        timeChart("overview-streams", "Live streams", series.times, [{ label: "Streams", values: series.streams }], {
          height: 140,
        }),
        timeChart("overview-calls", "Phone calls", series.times, [{ label: "Calls", values: series.calls }], {
          height: 140,
        }),
      ),
      h("h2", {}, "Recent failures"),
      table(
        "Failures in the last 24 hours",
        ["When", "Kind", "Account", "Room", "What", "Reason"],
        failures.map((failure) => [
          when(failure.at),
          failure.kind,
          accountName(context, failure.account_id),
          roomLabel(failure.room),
          failure.subject,
          failure.reason,
        ]),
        "none.",
      ),
    );
  });
}
