/**
 * Which conference an incoming call joins, in the order the gateway promises: the
 * conference-room header, a numeric Request-URI user, the configured default room, and
 * otherwise a conference id the caller keys in (resolved later, through `byMapperId`).
 */
import { roomAddress } from "../src/core/room-key";

/** The conference mapper as the gateway needs it (src/modules/mapper/service.ts behind it in production). */
export interface ConferenceDirectory {
  conferenceForMapperId(id: number): Promise<{ accountId: string; conference: string } | null>;
}

/** Jigasi's header name, read as well as the configured one so Jitsi-style trunks work unchanged. */
export const JIGASI_ROOM_HEADER = "Jitsi-Conference-Room";

export type ResolvedBy = "header" | "uri" | "default" | "dtmf";

export interface ResolvedRoom {
  accountId: string;
  /** The room's key (src/core/room-key), as every feature names the room. */
  room: string;
  /** The full conference address when one was given or mapped (room@conference.domain). */
  conference?: string;
  mapperId?: number;
  resolvedBy: ResolvedBy;
}

export type Resolution =
  | { kind: "room"; resolved: ResolvedRoom }
  | { kind: "unknown_id"; mapperId: number; source: "header" | "uri" }
  | { kind: "invalid_header"; value: string }
  | { kind: "no_account"; room: string }
  | { kind: "collect_dtmf" };

export interface RoomSettings {
  accountId?: string;
  defaultRoom?: string;
  /** The user part of the trunk's address of record: the gateway's own number, never a conference id. */
  ownNumber?: string;
}

const ROOM_NAME = /^[\p{L}\p{N}._~!$&'()*+,;=:%-]{1,200}$/u;
/** Mapper ids are positive integers; more than 15 digits would lose precision as a number. */
const MAPPER_ID = /^\d{1,15}$/;

/** The bare room of a header value or mapping: the key (core/room-key) of the local part of room@conference.domain. */
export function bareRoom(conference: string): string | undefined {
  if (conference.trim() === "") return undefined;
  const { room } = roomAddress(conference);
  return ROOM_NAME.test(room) ? room : undefined;
}

export async function byMapperId(
  directory: ConferenceDirectory,
  mapperId: number,
  resolvedBy: ResolvedBy,
): Promise<ResolvedRoom | null> {
  const mapping = await directory.conferenceForMapperId(mapperId);
  if (!mapping) return null;
  const room = bareRoom(mapping.conference);
  if (!room) return null;
  return { accountId: mapping.accountId, room, conference: mapping.conference, mapperId, resolvedBy };
}

function named(
  room: string,
  conference: string | undefined,
  resolvedBy: ResolvedBy,
  settings: RoomSettings,
): Resolution {
  if (!settings.accountId) return { kind: "no_account", room };
  return { kind: "room", resolved: { accountId: settings.accountId, room, conference, resolvedBy } };
}

export async function resolveRoom(
  call: { roomHeader?: string; requestUser?: string },
  settings: RoomSettings,
  directory: ConferenceDirectory,
): Promise<Resolution> {
  const value = call.roomHeader?.trim();
  if (value) {
    if (MAPPER_ID.test(value)) {
      const resolved = await byMapperId(directory, Number(value), "header");
      return resolved ? { kind: "room", resolved } : { kind: "unknown_id", mapperId: Number(value), source: "header" };
    }
    const room = bareRoom(value);
    if (!room || (value.includes("@") && !/^[^@]+@[^@\s]+$/.test(value))) return { kind: "invalid_header", value };
    return named(room, value.includes("@") ? roomAddress(value).address : undefined, "header", settings);
  }
  const user = call.requestUser;
  if (user && MAPPER_ID.test(user) && user !== settings.ownNumber) {
    const resolved = await byMapperId(directory, Number(user), "uri");
    return resolved ? { kind: "room", resolved } : { kind: "unknown_id", mapperId: Number(user), source: "uri" };
  }
  if (settings.defaultRoom) {
    const room = bareRoom(settings.defaultRoom);
    if (room)
      return named(
        room,
        settings.defaultRoom.includes("@") ? roomAddress(settings.defaultRoom).address : undefined,
        "default",
        settings,
      );
  }
  return { kind: "collect_dtmf" };
}
