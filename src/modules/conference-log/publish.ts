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
import { recordEvent } from "../catalogue";
import type { ConferenceFacts, EventSyncKind, Occupant } from "./event-sync";

const minutesOf = (seconds: number) => Math.ceil(Math.max(0, seconds) / 60);

function participant(occupant: Occupant) {
  return { occupant_jid: occupant.jid, id: occupant.userId, name: occupant.name, email: occupant.email };
}

/**
 * The catalogue events of a new delivery, from its facts (a
 * checked delivery names its room's start, or its one occupant).
 */
export async function publishEventSync(
  tx: Database,
  accountId: string,
  kind: EventSyncKind,
  room: string,
  facts: ConferenceFacts,
): Promise<void> {
  const where = { room, breakout_id: facts.breakoutId };
  switch (kind) {
    case "room_created":
      await recordEvent(tx, accountId, "room.started", { ...where, started_at: facts.startedAt!.toISOString() });
      return;
    case "room_destroyed":
      // room.ended follows from the fold that ends the room life (see above).
      return;
    case "occupant_joined": {
      const occupant = facts.occupants[0]!;
      await recordEvent(tx, accountId, "participant.joined", {
        ...where,
        participant: participant(occupant),
        joined_at: occupant.joinedAt,
      });
      return;
    }
    case "occupant_left": {
      const occupant = facts.occupants[0]!;
      await recordEvent(tx, accountId, "participant.left", {
        ...where,
        participant: participant(occupant),
        joined_at: occupant.joinedAt,
        left_at: occupant.leftAt!,
        minutes: minutesOf((Date.parse(occupant.leftAt!) - Date.parse(occupant.joinedAt)) / 1000),
      });
      return;
    }
  }
}
