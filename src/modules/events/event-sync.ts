/** The shape of Jitsi's event_sync deliveries (jitsi-contrib mod_event_sync_component), shared by the log and the catalogue. */

export const EVENT_SYNC_NAMES = {
  room_created: "muc-room-created",
  room_destroyed: "muc-room-destroyed",
  occupant_joined: "muc-occupant-joined",
  occupant_left: "muc-occupant-left",
} as const;
export type EventSyncKind = keyof typeof EVENT_SYNC_NAMES;

export interface EventSyncOccupant {
  occupant_jid: string;
  joined_at: number;
  left_at?: number;
  name?: string;
  email?: string;
  id?: string | number;
  [extra: string]: unknown;
}

/** One event_sync delivery body; the module may add room attributes and user context fields. */
export interface EventSyncBody {
  event_name: string;
  room_name: string;
  room_jid?: string;
  is_breakout?: boolean;
  breakout_room_id?: string;
  created_at?: number;
  destroyed_at?: number;
  active_occupants_count?: number;
  occupant?: EventSyncOccupant;
  all_occupants?: EventSyncOccupant[] | Record<string, EventSyncOccupant>;
  [extra: string]: unknown;
}

/** The breakout room's id, or "" for the main room. */
export function breakoutOf(body: Pick<EventSyncBody, "is_breakout" | "breakout_room_id">): string {
  return body.is_breakout ? (body.breakout_room_id ?? "") : "";
}
