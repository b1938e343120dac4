/**
 * The one key of a conference room, the name Jitsi itself gives the MUC room: jitsi-meet's
 * `getBackendSafeRoomName` (react/features/base/util/uri). What a user typed ("Design
 * Review"), the room's MUC node (`design%20review`) and anything in between name one room.
 *
 * The rule: decode percent-escapes when they decode (a stray `%` is kept as typed), NFKC,
 * lower-case, `encodeURIComponent`, lower-case again (the escapes' hex digits). It is
 * idempotent: the key of a key is the key.
 */
export function roomKey(room: string): string {
  return encodeURIComponent(roomLabel(room).normalize("NFKC").toLowerCase()).toLowerCase();
}

/**
 * A room key as people read it (`weekly%20sync%20%e2%98%95` is "weekly sync ☕"): its escapes decoded where they decode.
 */
export function roomLabel(room: string): string {
  try {
    return decodeURIComponent(room);
  } catch {
    // Not percent-encoded after all (e.g. "100%"): jitsi-meet goes on with the text as it is.
    return room;
  }
}

/**
 * The key of the room in `room@conference.domain` (or of a bare room name) and the address
 * rebuilt on it, host lower-cased. A key never holds `@` (it is encoded), so the first `@`
 * ends the room.
 */
export function roomAddress(address: string): { room: string; host: string | undefined; address: string } {
  const trimmed = address.trim();
  const at = trimmed.indexOf("@");
  const room = roomKey(at >= 0 ? trimmed.slice(0, at) : trimmed);
  const host = at >= 0 ? trimmed.slice(at + 1).toLowerCase() : undefined;
  return { room, host, address: host === undefined ? room : `${room}@${host}` };
}
