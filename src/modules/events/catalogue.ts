/**
 * The public catalogue events an event_sync delivery means. They are written when the
 * delivery is stored (in its transaction), not when the cdr worker folds it: the append is
 * the moment Parley learns and acknowledges the fact, it happens once per fact (retries are
 * de-duplicated there), and it does not wait for the fold or for Redis. room.ended is the
 * exception: its figures are the usage report's for the meeting, so the fold that ends the
 * room life writes it (src/modules/usage/room-ended.ts), from the stays it folded; the
 * destroy's own occupant list may name nobody.
 */
import type { Database } from "../../db/client";
import { recordEvent } from "../webhooks/outbox";
import { breakoutOf, type EventSyncKind } from "./event-sync";
import type { EventSyncBody, EventSyncOccupant } from "./model";

const iso = (unixSeconds: number) => new Date(Math.floor(unixSeconds) * 1000).toISOString();
const minutesOf = (seconds: number) => Math.ceil(Math.max(0, seconds) / 60);
const textOrNull = (value: unknown) => (value === undefined || value === null || value === "" ? null : String(value));

function participant(occupant: EventSyncOccupant) {
  return { occupant_jid: occupant.occupant_jid, id: textOrNull(occupant.id), name: textOrNull(occupant.name), email: textOrNull(occupant.email) };
}

export async function publishEventSync(tx: Database, accountId: string, kind: EventSyncKind, room: string, body: EventSyncBody): Promise<void> {
  const where = { room, breakout_id: breakoutOf(body) };
  switch (kind) {
    case "room_created":
      await recordEvent(tx, accountId, "room.started", { ...where, started_at: iso(body.created_at!) });
      return;
    case "room_destroyed":
      // room.ended follows from the fold that ends the room life (see above).
      return;
    case "occupant_joined":
      await recordEvent(tx, accountId, "participant.joined", { ...where, participant: participant(body.occupant!), joined_at: iso(body.occupant!.joined_at) });
      return;
    case "occupant_left": {
      const occupant = body.occupant!;
      await recordEvent(tx, accountId, "participant.left", {
        ...where,
        participant: participant(occupant),
        joined_at: iso(occupant.joined_at),
        left_at: iso(occupant.left_at!),
        minutes: minutesOf(occupant.left_at! - occupant.joined_at),
      });
      return;
    }
  }
}
