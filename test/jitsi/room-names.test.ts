/**
 * Parley's room key against jitsi-meet's own room naming (base/util/uri.ts as the npm
 * registry ships it, test/support/jitsi-meet.ts), over a few thousand generated names:
 * spaces, `%` with and without valid escapes, mixed case, characters NFKC folds (full-width
 * letters, ligatures, super- and subscripts, the Kelvin and Ångström signs, decomposed
 * accents), accents, emoji with modifiers and joiners, punctuation, letters whose lower case
 * depends on context or locale (Σ, İ), and lone surrogates.
 *
 * Two properties, for each name:
 * - Parley keys a name as jitsi-meet names the MUC room for it: `roomKey(name)` is
 *   `getBackendSafeRoomName(name)` (both throw on a name that cannot be encoded);
 * - the room jitsi-meet opens for the name in a meeting URL (the browser's address, read by
 *   jitsi-meet's `parseURIString`, then `getBackendSafeRoomName`), which is what reaches
 *   Prosody and comes back to Parley from mod_reservations, event_sync and the dial-in
 *   page, is its own key: Parley files it under exactly that name.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import { roomAddress, roomKey } from "../../src/core/room-key";
import { type JitsiMeetRoomNames, jitsiMeetRoomNames } from "../support/jitsi-meet";

const NAMES = 5_000;
/** Printed with a failure, so the failing names can be generated again: ROOM_NAMES_SEED=<seed>. */
const SEED = Number(process.env.ROOM_NAMES_SEED ?? Date.now() % 2 ** 31);

/** mulberry32: a small seeded generator, so a failing run can be repeated. */
function random(seed: number) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

const PIECES: string[][] = [
  // Letters and digits in both cases, and words.
  [..."abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"],
  ["Design", "Review", "STANDUP", "team", "Daily", "sync"],
  // Spaces and percent signs: stray, valid escapes (upper and lower hex), an escaped percent, broken UTF-8.
  [" ", "  ", "\t", "%", "100%", "%20", "%2F", "%c3%a9", "%C3%A9", "%25", "%2520", "%zz", "%E9", "%F0%9F%98%80", "%"],
  // NFKC pairs: each folds to something else.
  [
    "Ｔｅａｍ",
    "ﬁ",
    "ﬀ",
    "²",
    "₃",
    "Ⅳ",
    "ⅻ",
    "\u212a",
    "\u212b",
    "e\u0301",
    "A\u030a",
    "㎏",
    "①",
    "ﾀ",
    "\u00a0",
    "\u2003",
    "™",
    "½",
    "ǅ",
  ],
  // Accents and other scripts.
  ["é", "Ä", "ø", "ß", "ẞ", "Ç", "ñ", "Ω", "ΣΑΣ", "İstanbul", "ı", "Ǆ", "日本", "한국", "ёЖ", "עברית", "عربي"],
  // Emoji: single, with a skin tone, joined, flags, keycaps.
  ["😀", "👍🏽", "👩‍💻", "🏳️‍🌈", "🇩🇪", "1️⃣", "❤️"],
  // Punctuation, URL delimiters among them.
  [..."!\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~"],
  // Lone surrogates: text that cannot be percent-encoded.
  ["\ud800", "\udfff"],
];

function generate(next: () => number): string {
  const length = 1 + Math.floor(next() * 8);
  let name = "";
  for (let i = 0; i < length; i++) {
    // Lone surrogates are rare, so most names are encodable.
    const group = PIECES[Math.floor(next() * (next() < 0.02 ? PIECES.length : PIECES.length - 1))]!;
    name += group[Math.floor(next() * group.length)];
  }
  return name;
}

function outcome(key: (name: string) => string | undefined, name: string): string {
  try {
    return `key ${JSON.stringify(key(name))}`;
  } catch (error) {
    return `throws ${(error as Error).name}`;
  }
}

describe(`Parley's room key is jitsi-meet's room name (seed ${SEED})`, () => {
  let jitsi: JitsiMeetRoomNames & { parseURIString(uri: string): { room?: string } | undefined };
  const names: string[] = [];

  beforeAll(async () => {
    jitsi = (await jitsiMeetRoomNames()) as typeof jitsi;
    const next = random(SEED);
    for (let i = 0; i < NAMES; i++) names.push(generate(next));
  });

  test(`${NAMES} names: roomKey(name) is getBackendSafeRoomName(name)`, () => {
    const differ = names
      .map((name) => ({ name, parley: outcome(roomKey, name), jitsi: outcome(jitsi.getBackendSafeRoomName, name) }))
      .filter((result) => result.parley !== result.jitsi);
    expect(differ.slice(0, 10)).toEqual([]);
    // The generator reached the cases it is for.
    expect(names.filter((name) => name.normalize("NFKC") !== name).length).toBeGreaterThan(NAMES / 10);
    expect(names.filter((name) => /%[0-9a-f]{2}/i.test(name)).length).toBeGreaterThan(NAMES / 10);
    expect(names.filter((name) => outcome(roomKey, name).startsWith("throws")).length).toBeGreaterThan(0);
  });

  test(`${NAMES} names in a meeting URL: the room jitsi-meet opens is its own key`, () => {
    let rooms = 0;
    const differ: Array<{ name: string; room: string; key: string }> = [];
    for (const name of names) {
      let address: string;
      try {
        address = new URL(`https://meet.example.com/${name}`).href;
      } catch {
        continue;
      }
      const typed = jitsi.parseURIString(address)?.room;
      const room = typed === undefined ? undefined : jitsi.getBackendSafeRoomName(typed);
      if (!room) continue;
      rooms++;
      const key = roomKey(room);
      if (key !== room || roomAddress(`${room}@conference.meet.example.com`).room !== room)
        differ.push({ name, room, key });
    }
    expect(differ.slice(0, 10)).toEqual([]);
    expect(rooms).toBeGreaterThan(NAMES * 0.9);
  });
});
