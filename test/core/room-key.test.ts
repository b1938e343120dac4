import { describe, expect, test } from "bun:test";
import { roomAddress, roomKey } from "../../src/core/room-key";

describe("roomKey: jitsi-meet's getBackendSafeRoomName", () => {
  test.each([
    ["Design Review", "design%20review"],
    ["design review", "design%20review"],
    ["design%20review", "design%20review"],
    ["DESIGN%20REVIEW", "design%20review"],
    ["Café", "caf%c3%a9"],
    // NFKC: the decomposed é and full-width letters fold to what users usually type.
    ["Cafe\u0301", "caf%c3%a9"],
    ["Ｔｅａｍ", "team"],
    ["team_sync", "team_sync"],
    ["ad-hoc", "ad-hoc"],
    // A stray % does not decode: kept, then encoded.
    ["100%", "100%25"],
    ["a/b", "a%2fb"],
    ["it's (fine)!", "it's%20(fine)!"],
  ])("%p is %p", (typed, key) => {
    expect(roomKey(typed)).toBe(key);
    // The key of a key is the key.
    expect(roomKey(key)).toBe(key);
  });

  test("an address keeps its host, lower-cased", () => {
    expect(roomAddress("Design Review@Conference.Meet.Example.com")).toEqual({
      room: "design%20review",
      host: "conference.meet.example.com",
      address: "design%20review@conference.meet.example.com",
    });
    expect(roomAddress(" Café ")).toEqual({ room: "caf%c3%a9", host: undefined, address: "caf%c3%a9" });
  });
});
