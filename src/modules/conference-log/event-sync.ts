/**
 * Jitsi's event_sync deliveries (see model.ts) turned into Parley's own shape. This is the one
 * place that reads the module's payload: the log stores what `eventSyncFacts` answers in typed
 * columns beside the raw body (kept for audit), and the fold and the catalogue read those
 * columns only.
 */
import type { EventSyncBody, EventSyncOccupant } from "./model";

export const EVENT_SYNC_NAMES = {
  room_created: "muc-room-created",
  room_destroyed: "muc-room-destroyed",
  occupant_joined: "muc-occupant-joined",
  occupant_left: "muc-occupant-left",
} as const;
export type EventSyncKind = keyof typeof EVENT_SYNC_NAMES;

export const isEventSyncKind = (kind: string): kind is EventSyncKind => Object.hasOwn(EVENT_SYNC_NAMES, kind);

/** Someone's stay in a room, as a delivery tells it: a join names no leave yet. */
export interface Occupant {
  jid: string;
  userId: string | null;
  name: string | null;
  email: string | null;
  /** ISO instants, whole seconds. */
  joinedAt: string;
  leftAt: string | null;
}

/** What a conference event tells, in Parley's terms: the columns of the log beside its raw payload. */
export interface ConferenceFacts {
  /** The breakout room's id, or "" for the main room. */
  breakoutId: string;
  roomJid: string | null;
  /** The room life's start (room_created, room_destroyed) and end (room_destroyed). */
  startedAt: Date | null;
  endedAt: Date | null;
  /** A join's or a leave's occupant, or everyone a destroyed room had; only those that name a stay. */
  occupants: Occupant[];
}

/** The breakout room's id, or "" for the main room. */
export function breakoutOf(body: Pick<EventSyncBody, "is_breakout" | "breakout_room_id">): string {
  return body.is_breakout ? (body.breakout_room_id ?? "") : "";
}

/** Prosody's JSON encoder writes an empty Lua table as {}, so the occupant list may come as an object. */
export function occupantsOf(body: Pick<EventSyncBody, "all_occupants">): EventSyncOccupant[] {
  const all: unknown = body.all_occupants;
  if (Array.isArray(all)) return all;
  return all !== null && typeof all === "object" ? Object.values(all) : [];
}

const textOrNull = (value: unknown): string | null => {
  if (value === undefined || value === null || value === "") return null;
  return typeof value === "object" ? JSON.stringify(value) : String(value);
};

/** Unix seconds as a whole-second instant; null unless a number ≥ 0 that a date can hold. */
function unixAt(value: unknown): Date | null {
  if (typeof value !== "number" || !(value >= 0)) return null;
  const at = new Date(Math.floor(value) * 1000);
  return Number.isNaN(at.getTime()) ? null : at;
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === "object" && !Array.isArray(value);

function occupant(value: unknown, leftRequired: boolean): Occupant | null {
  if (!isObject(value) || typeof value.occupant_jid !== "string") return null;
  const joinedAt = unixAt(value.joined_at);
  const leftAt = unixAt(value.left_at);
  if (!joinedAt || (leftRequired && !leftAt)) return null;
  return {
    jid: value.occupant_jid,
    userId: textOrNull(value.id),
    name: textOrNull(value.name),
    email: textOrNull(value.email),
    joinedAt: joinedAt.toISOString(),
    leftAt: leftAt?.toISOString() ?? null,
  };
}

/**
 * The facts of a conference event's payload. Lenient, since the log also holds events that
 * did not come through the event_sync routes (which check every field before storing): a
 * time that is not unix seconds is left out, and an occupant without a jid or a join (or a
 * leave's occupant without its leave) names no stay.
 */
export function eventSyncFacts(kind: EventSyncKind, payload: Record<string, unknown>): ConferenceFacts {
  const room = kind === "room_created" || kind === "room_destroyed";
  const startedAt = room ? unixAt(payload.created_at) : null;
  const endedAt = kind === "room_destroyed" ? unixAt(payload.destroyed_at) : null;
  let occupants: Array<Occupant | null> = [];
  if (kind === "room_destroyed" && startedAt && endedAt)
    occupants = occupantsOf(payload as EventSyncBody).map((one) => occupant(one, false));
  if (!room) occupants = [occupant(payload.occupant, kind === "occupant_left")];
  return {
    breakoutId: payload.is_breakout === true ? (textOrNull(payload.breakout_room_id) ?? "") : "",
    roomJid: textOrNull(payload.room_jid),
    startedAt,
    endedAt,
    occupants: occupants.filter((one) => one !== null),
  };
}
