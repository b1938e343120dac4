/**
 * The reconnect window: participant events keep a live occupant set per room in Redis, and a
 * stream stops once its room has stayed empty for the window it was started with.
 */
import { log } from "../../src/core/log";
import { RECONNECT_WINDOW_UNIT_MS } from "../../src/modules/streaming/options";
import { redis, redisKey } from "../../src/queue/connection";
import { type LocalRecorder, type RecorderHost, stopLocal } from "./local";

const occupantsKey = (accountId: string, room: string) => redisKey("room", accountId, room, "occupants");

export async function checkOccupancy(worker: RecorderHost, entry: LocalRecorder): Promise<void> {
  const key = occupantsKey(entry.stream.accountId, entry.stream.room);
  const [known, occupants] = await Promise.all([redis().exists(key, `${key}:seen`), redis().scard(key)]);
  clearTimeout(entry.emptyTimer);
  entry.emptyTimer = undefined;
  // A room nobody was ever seen in (no participant events at all) is not "empty": it is unknown.
  if (known === 0 || occupants > 0 || entry.stopping) return;
  const windowMs = entry.stream.options.reconnectWindow * RECONNECT_WINDOW_UNIT_MS;
  entry.emptyTimer = setTimeout(() => {
    void (async () => {
      if ((await redis().scard(key)) > 0 || entry.stopping) return;
      await stopLocal(worker, entry, "stopped", "room_empty");
    })().catch((error: Error) => log.error({ stream: entry.stream.streamName, err: error.message }, "reconnect window stop failed"));
  }, windowMs);
}

/** One event of the feed (modules/events): joins, leaves and room ends move the room's occupant set. */
export async function onConferenceEvent(worker: RecorderHost, message: string): Promise<void> {
  const event = JSON.parse(message) as { accountId: string; kind: string; room: string; subject?: string };
  if (!["occupant_joined", "occupant_left", "room_destroyed"].includes(event.kind)) return;
  const key = occupantsKey(event.accountId, event.room);
  // Every worker applies every event; the set operations are idempotent, so that is harmless.
  const pipeline = redis().multi();
  if (event.kind === "occupant_joined" && event.subject) pipeline.sadd(key, event.subject);
  else if (event.kind === "occupant_left" && event.subject) pipeline.srem(key, event.subject);
  else if (event.kind === "room_destroyed") pipeline.del(key);
  pipeline.set(`${key}:seen`, "1", "EX", 86_400).expire(key, 86_400);
  await pipeline.exec();
  for (const entry of worker.local.values()) {
    if (entry.stream.accountId === event.accountId && entry.stream.room === event.room && entry.stream.state === "running") {
      await checkOccupancy(worker, entry);
    }
  }
}
