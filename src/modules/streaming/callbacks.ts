/** Media-server callbacks: who may publish under a stream's names, and plays moving the viewer count. */
import { timingSafeEqual } from "node:crypto";
import { config } from "../../core/config";
import { AppError } from "../../core/errors";
import { baseStreamName } from "./ladder";
import { LIVE_STATES, streamByName } from "./stream";
import { changeViewers } from "./viewers";

export const MEDIA_CALLBACKS = [
  "on_publish",
  "on_unpublish",
  "on_play",
  "on_stop",
  "on_done",
  "on_publish_done",
  "on_play_done",
] as const;
export type MediaCallback = (typeof MEDIA_CALLBACKS)[number];

/**
 * Accepts a callback when it carries the shared secret (if one
 * is set) and comes from an allowed address (if a list is set).
 */
export function callbackAllowed(secret: string | undefined, address: string | undefined): boolean {
  const wanted = config.streaming.callbackSecret;
  if (wanted !== undefined) {
    const given = Buffer.from(secret ?? "");
    const expected = Buffer.from(wanted);
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) return false;
  }
  const addresses = config.streaming.callbackAddresses;
  if (addresses.length > 0 && (address === undefined || !addresses.includes(address))) return false;
  return true;
}

/**
 * One media-server callback, from SRS (JSON: action, stream, client_id) or nginx-rtmp
 * (form: call, name, clientid). Publishing is allowed only for a live stream's names;
 * plays and their ends move the viewer set. Throws to refuse.
 */
export async function handleMediaCallback(callback: MediaCallback, fields: Record<string, unknown>): Promise<void> {
  const field = (...names: string[]) => {
    for (const name of names) if (fields[name] !== undefined && fields[name] !== null) return String(fields[name]);
    return "";
  };
  const published = field("name", "stream");
  const app = field("app");
  const client = `${app}/${field("clientid", "client_id")}`;
  // nginx-rtmp's plain on_done fires for players and publishers alike; `call` says which one it was.
  const call = field("call", "action").replace(/^on_/, "") || callback.replace(/^on_/, "");
  const stream = /^[A-Za-z0-9._-]{1,160}$/.test(published) ? await streamByName(baseStreamName(published)) : undefined;
  switch (call) {
    case "publish":
      // A stream being stopped is still its recorder's: a stop that cannot be queued puts it back to
      // running, and a publish refused meanwhile would have cut the stream the stop's 503 said goes on.
      if (!stream || !LIVE_STATES.includes(stream.state))
        throw new AppError("forbidden", "no live stream is published under that name");
      return;
    case "play":
      if (!stream) throw new AppError("not_found", "no stream by that name");
      if (!LIVE_STATES.includes(stream.state)) throw new AppError("forbidden", "the stream is not live");
      await changeViewers(stream, "add", client);
      return;
    case "stop":
    case "done":
    case "play_done":
      if (stream) await changeViewers(stream, "remove", client);
      return;
    default:
      // unpublish / publish_done: the recorder itself notices its publisher ending.
      return;
  }
}
