/** What `firstUnstorable` and `isStorable` say of a value: the path of the first string PostgreSQL could not store. */
import { expect, test } from "bun:test";
import { firstUnstorable, isStorable } from "../../src/http/text";

const REASON = "must not contain NUL characters or unpaired UTF-16 surrogates";

test("storable text passes: plain, accented, emoji (a paired surrogate), and every other JSON value", () => {
  for (const text of ["", "plain", "Grüße, Zoë", "on air 🎙️", "\uD83D\uDE00"]) expect(isStorable(text)).toBe(true);
  expect(firstUnstorable({ a: "x", b: [1, true, null, { c: "🎙️" }], "é 🎙️": 2 })).toBeUndefined();
  expect(firstUnstorable(42)).toBeUndefined();
  expect(firstUnstorable(null, "query")).toBeUndefined();
});

test("a NUL, a lone high or a lone low surrogate anywhere in a string is refused", () => {
  for (const text of ["a\u0000b", "\u0000", "x\uD83D", "\uD83Dx", "\uDE00", "a\uDE00\uD83D"]) {
    expect(isStorable(text)).toBe(false);
  }
});

test("the path names where the first one is, below the prefix given", () => {
  expect(firstUnstorable("a\u0000")).toEqual({ path: "value", reason: REASON });
  expect(firstUnstorable("a\u0000", "topic")).toEqual({ path: "topic", reason: REASON });
  expect(firstUnstorable({ user: { name: "ok", email: "\uD800" } })).toEqual({ path: "user.email", reason: REASON });
  expect(firstUnstorable({ list: ["ok", { deep: ["ok", "\u0000"] }] }, "payload")).toEqual({
    path: "payload.list.1.deep.1",
    reason: REASON,
  });
  expect(firstUnstorable(["ok", "\u0000"])).toEqual({ path: "1", reason: REASON });
  expect(firstUnstorable({ a: "\u0000", b: "\u0000" })).toEqual({ path: "a", reason: REASON });
});

test("a member name that cannot be stored is named by the object that holds it", () => {
  expect(firstUnstorable({ "a\u0000": 1 })).toEqual({ path: "body (a member name)", reason: REASON });
  expect(firstUnstorable({ "a\u0000": 1 }, "query")).toEqual({ path: "query (a member name)", reason: REASON });
  expect(firstUnstorable({ occupant: { extra: [{ "\uDC00": 1 }] } })).toEqual({
    path: "occupant.extra.0 (a member name)",
    reason: REASON,
  });
});

test("JSON nested deeper than 64 levels is refused rather than walked", () => {
  let value: unknown = "deepest";
  for (let level = 0; level < 70; level++) value = [value];
  const found = firstUnstorable({ nested: value });
  expect(found?.reason).toBe("must not nest deeper than 64 levels");
  expect(found?.path).toBe(`nested${".0".repeat(63)}`);
});
