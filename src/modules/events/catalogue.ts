/**
 * The public catalogue events an event_sync delivery means. They are written when the
 * delivery is stored (in its transaction), not when the cdr worker folds it: the append is
 * the moment Parley learns and acknowledges the fact, it happens once per fact (retries are
 * de-duplicated there), and it does not wait for the fold or for Redis. room.ended's minutes
 * come from the destroy delivery itself, which lists every occupant with join and leave times.
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
    case "room_destroyed": {
      const occupants = Array.isArray(body.all_occupants) ? body.all_occupants : Object.values(body.all_occupants ?? {});
      const seconds = body.destroyed_at! - body.created_at!;
      // An occupant with no leave stayed until the room ended.
      const stays = occupants.reduce((sum, occupant) => sum + Math.max(0, (occupant.left_at ?? body.destroyed_at!) - occupant.joined_at), 0);
      await recordEvent(tx, accountId, "room.ended", {
        ...where,
        started_at: iso(body.created_at!),
        ended_at: iso(body.destroyed_at!),
        duration_seconds: Math.floor(seconds),
        minutes: minutesOf(seconds),
        participant_minutes: minutesOf(stays),
        participants: new Set(occupants.map((occupant) => occupant.occupant_jid)).size,
      });
      return;
    }
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
