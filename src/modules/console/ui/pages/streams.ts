/**
 * The queue of starts waiting for a recorder, with their places, and the running and recent
 * streams, updated live; play one in the page, stop it, open its recording.
 */
import { roomLabel } from "../../../../core/room-key";
import { api } from "../api";
import { h, notice, table, when } from "../dom";
import { liveFeed, type StreamView } from "../live";
import { accountName, type PageContext } from "../page";

const LIVE = ["starting", "running", "stopping"];
/** Where bundle.ts serves hls.js's light build; a variable, so the bundler does not follow it. */
const HLS_SCRIPT: string = "/console/hls-light.js";

async function play(video: HTMLVideoElement, url: string, context: PageContext): Promise<void> {
  if (video.canPlayType("application/vnd.apple.mpegurl")) {
    video.src = url;
    return;
  }
  // hls.js is fetched only here, as a file of its own: the other pages never load it. It is
  // the package's own minified build, served as it is (see bundle.ts), so the bundler leaves it alone.
  const { default: Hls }: typeof import("hls.js") = await import(HLS_SCRIPT);
  const hls = new Hls();
  hls.loadSource(url);
  hls.attachMedia(video);
  context.onLeave(() => hls.destroy());
}

export function streamsPage(root: HTMLElement, context: PageContext): void {
  const status = notice();
  const list = h("div", { class: "streams", "aria-busy": "true" });
  const player = h("section", { class: "player", "aria-label": "Player", hidden: true });
  root.append(status, player, list);

  const stop = async (stream: StreamView) => {
    status.textContent = `Stopping ${stream.stream_name}…`;
    try {
      await api("post", "/streams/stop", { body: { account: stream.account_id, room: stream.room } });
      status.textContent = `${stream.stream_name} stopped.`;
    } catch (error) {
      status.textContent = error instanceof Error ? error.message : String(error);
    }
  };
  const open = async (stream: StreamView) => {
    const video = h("video", {
      controls: true,
      muted: true,
      autoplay: true,
      playsinline: true,
      "aria-label": `Live stream ${stream.stream_name}`,
    });
    player.hidden = false;
    player.replaceChildren(
      h("h2", {}, `Playing ${stream.stream_name}`),
      video,
      h("p", {}, h("a", { href: stream.hls_url }, "HLS playlist")),
    );
    await play(video, stream.hls_url, context);
  };

  liveFeed(context, "streams", ({ streams }) => {
    list.removeAttribute("aria-busy");
    // Waiting for a recorder worker with room, in the order they will start.
    const queued = streams
      .filter((stream) => stream.position !== null)
      .sort((a, b) => (a.position ?? 0) - (b.position ?? 0));
    list.replaceChildren(
      table(
        "Queue",
        ["Position", "Stream", "Account", "Room", "Priority", "Queued", "Actions"],
        queued.map((stream) => [
          h("span", { "data-queue-position": stream.stream_name }, String(stream.position)),
          stream.stream_name,
          accountName(context, stream.account_id),
          roomLabel(stream.room),
          stream.priority,
          when(stream.created_at),
          h(
            "button",
            { type: "button", class: "danger", onclick: () => void stop(stream) },
            `Stop ${stream.stream_name}`,
          ),
        ]),
        "no stream waits for a recorder.",
      ),
      table(
        "Running and recent streams",
        ["Stream", "Account", "Room", "State", "Reason", "Viewers", "Peak", "Started", "Actions"],
        streams.map((stream) => [
          stream.stream_name,
          accountName(context, stream.account_id),
          roomLabel(stream.room),
          h("span", { class: `state state-${stream.state}`, "data-stream-state": stream.stream_name }, stream.state),
          stream.reason ?? "",
          stream.viewers,
          stream.peak_viewers,
          when(stream.created_at),
          h(
            "span",
            { class: "actions" },
            LIVE.includes(stream.state) &&
              h("button", { type: "button", onclick: () => void open(stream) }, `Play ${stream.stream_name}`),
            ["starting", "running"].includes(stream.state) &&
              h(
                "button",
                { type: "button", class: "danger", onclick: () => void stop(stream) },
                `Stop ${stream.stream_name}`,
              ),
            stream.vod_url && h("a", { href: stream.vod_url }, `Recording of ${stream.stream_name}`),
          ),
        ]),
        "no streams yet.",
      ),
    );
  });
}
