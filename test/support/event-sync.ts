/**
 * Bodies exactly as Jitsi's event_sync Prosody module sends them (jitsi-contrib/prosody-plugins,
 * event_sync/mod_event_sync_component.lua): unix-second timestamps, the main room's name and
 * jid on breakout events, the JWT user context copied into each occupant.
 */
import { call } from "../helpers";

export const DOMAIN = "conference.meet.example.com";

export interface Person {
  name?: string;
  email?: string;
  id?: string;
  /** The connection's full jid; a rejoin gets a new resource. */
  occupant_jid: string;
}

/** Unix seconds of a time on 2026-11-20 (UTC), "09:05:00"; "+1 00:30:00" is on the next day. */
export function at(time: string): number {
  const [, plus, hms] = /^(?:\+(\d+) )?(\d{2}:\d{2}:\d{2})$/.exec(time)!;
  return Date.parse(`2026-11-20T${hms}Z`) / 1000 + Number(plus ?? 0) * 86_400;
}

export function roomFields(room: string, breakout?: string) {
  return {
    room_name: room,
    room_jid: `${room}@${DOMAIN}`,
    is_breakout: breakout !== undefined,
    ...(breakout !== undefined && { breakout_room_id: breakout }),
  };
}

export const roomCreated = (room: string, createdAt: number, breakout?: string) => ({
  path: "/api/v1/events/room/created",
  body: { event_name: "muc-room-created", ...roomFields(room, breakout), created_at: createdAt },
});

export const roomDestroyed = (
  room: string,
  createdAt: number,
  destroyedAt: number,
  allOccupants: Array<Person & { joined_at: number; left_at?: number }>,
  breakout?: string,
) => ({
  path: "/api/v1/events/room/destroyed",
  body: {
    event_name: "muc-room-destroyed",
    ...roomFields(room, breakout),
    created_at: createdAt,
    destroyed_at: destroyedAt,
    // An empty Lua table is encoded as {} by Prosody's JSON encoder.
    all_occupants: allOccupants.length === 0 ? {} : allOccupants,
  },
});

export const occupantJoined = (room: string, person: Person, joinedAt: number, count: number, breakout?: string) => ({
  path: "/api/v1/events/occupant/joined",
  body: {
    event_name: "muc-occupant-joined",
    ...roomFields(room, breakout),
    active_occupants_count: count,
    occupant: { ...person, joined_at: joinedAt },
  },
});

export const occupantLeft = (
  room: string,
  person: Person,
  joinedAt: number,
  leftAt: number,
  count: number,
  breakout?: string,
) => ({
  path: "/api/v1/events/occupant/left",
  body: {
    event_name: "muc-occupant-left",
    ...roomFields(room, breakout),
    active_occupants_count: count,
    occupant: { ...person, joined_at: joinedAt, left_at: leftAt },
  },
});

export interface Delivery {
  path: string;
  body: Record<string, unknown>;
}

/** Posts a delivery as the module does, with its configured api_headers. */
export function deliver(apiKey: string, delivery: Delivery) {
  return call("POST", delivery.path, {
    body: delivery.body,
    headers: { authorization: `Bearer ${apiKey}`, "user-agent": "Prosody (0.12.4; posix)" },
  });
}
