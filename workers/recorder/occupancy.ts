/**
 * The reconnect window: a stream stops once its room has stayed empty for the window it was
 * started with. Who is in a room is read from the stored conference events (the database is
 * the truth); the outbox's "occupancy" consumer looks again whenever a join, a leave or a
 * room's end is stored for a room this worker records, and its sweep looks at every stream.
 */
import type { OutboxConsumer } from "../../src/core/outbox";
import { log } from "../../src/core/log";
import { OCCUPANCY_CONSUMER, ringKey, roomOccupancy } from "../../src/modules/conference-log";
import { RECONNECT_WINDOW_UNIT_MS } from "../../src/modules/streaming";
import { type LocalRecorder, type RecorderHost, stopLocal } from "./local";

/** How often every stream's room is looked at again, in case a ring was lost. */
const SWEEP_MS = 10_000;

/**
 * Starts the stream's empty-room countdown when its room is empty and none runs, and ends it
 * when someone is there; a look that finds nothing changed leaves a running countdown alone.
 */
export async function checkOccupancy(worker: RecorderHost, entry: LocalRecorder): Promise<void> {
  const { known, occupants } = await roomOccupancy(entry.stream);
  // A room nobody was ever seen in (no participant events at all) is not "empty": it is unknown.
  if (!known || occupants > 0 || entry.stopping) {
    clearTimeout(entry.emptyTimer);
    entry.emptyTimer = undefined;
    return;
  }
  if (entry.emptyTimer) return;
  const windowMs = entry.stream.options.reconnectWindow * RECONNECT_WINDOW_UNIT_MS;
  entry.emptyTimer = setTimeout(() => {
    void (async () => {
      if ((await roomOccupancy(entry.stream)).occupants > 0 || entry.stopping) return;
      await stopLocal(worker, entry, "stopped", "room_empty");
    })().catch((error: Error) =>
      log.error({ stream: entry.stream.streamName, err: error.message }, "reconnect window stop failed"),
    );
  }, windowMs);
}

/** The worker's occupancy consumer: a ring names rooms (events/rings.ts ringKey) whose occupants moved. */
export function occupancyConsumer(worker: RecorderHost): OutboxConsumer {
  return {
    name: OCCUPANCY_CONSUMER,
    sweepEveryMs: SWEEP_MS,
    async drain(due) {
      const running = [...worker.local.values()].filter(
        (entry) => entry.stream.state === "running" && (due === "sweep" || due.has(ringKey(entry.stream))),
      );
      for (const entry of running) await checkOccupancy(worker, entry);
      return running.length;
    },
  };
}
