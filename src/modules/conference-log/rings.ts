/**
 * What a stored conference event rings through the outbox (core/outbox) once its transaction
 * commits: the fold of its room (the cdr worker's consumer), and for a join, a leave or a
 * room's end, the room's occupancy (the recorder's consumer, which stops a stream whose room
 * stayed empty). Both name a room by its account and name; both find their work in the
 * database, so a lost ring only waits for the consumer's sweep.
 */
import type { Database } from "../../db/client";
import { outbox } from "../../outbox/outbox";
import type { EventKind } from "./schema";

type Room = { accountId: string; room: string };

/** Folds a rung room's unfolded events (conference_events_unfolded) into usage. */
export const FOLD_CONSUMER = "cdr";
/** Looks again at who is in a rung room, for the streams recorded from it. */
export const OCCUPANCY_CONSUMER = "occupancy";

/** A room's key in a ring: its account and its name. */
export const ringKey = (where: Room) => `${where.accountId}|${where.room}`;

/** The room a ring's key names (account ids hold no `|`; room names may). */
export function roomOfRingKey(key: string): Room {
  const bar = key.indexOf("|");
  return { accountId: key.slice(0, bar), room: key.slice(bar + 1) };
}

const OCCUPANCY_KINDS = new Set<EventKind>(["occupant_joined", "occupant_left", "room_destroyed"]);

type Stored = Room & { kind: EventKind };

/**
 * Rings, once `tx` commits, the fold of every room with a new event or a repeated one still
 * unfolded, and the occupancy of every room a new join, leave or end was stored for.
 */
export function ringStored(tx: Database, added: Stored[], unfoldedRepeats: Room[]): void {
  const folds = [...added, ...unfoldedRepeats].map(ringKey);
  if (folds.length > 0) outbox.ring(tx, FOLD_CONSUMER, folds);
  const moves = added.filter((event) => OCCUPANCY_KINDS.has(event.kind)).map(ringKey);
  if (moves.length > 0) outbox.ring(tx, OCCUPANCY_CONSUMER, moves);
}
