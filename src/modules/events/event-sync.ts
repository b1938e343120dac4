/** Jitsi's event_sync deliveries (see model.ts), shared by the log and the catalogue. */
import type { EventSyncBody } from "./model";

export const EVENT_SYNC_NAMES = {
  room_created: "muc-room-created",
  room_destroyed: "muc-room-destroyed",
  occupant_joined: "muc-occupant-joined",
  occupant_left: "muc-occupant-left",
} as const;
export type EventSyncKind = keyof typeof EVENT_SYNC_NAMES;

/** The breakout room's id, or "" for the main room. */
export function breakoutOf(body: Pick<EventSyncBody, "is_breakout" | "breakout_room_id">): string {
  return body.is_breakout ? (body.breakout_room_id ?? "") : "";
}
