import { beforeAll, describe, expect, test } from "bun:test";
import { call, newAccount } from "../helpers";

const API = "/api/v1/scheduler";

type Account = Awaited<ReturnType<typeof newAccount>>;

const as = (account: Account) => ({ authorization: account.apiKey });

function reserve(account: Account, body: Record<string, unknown>) {
  return call("POST", `${API}/reservation`, { headers: as(account), body });
}

const booking = (overrides: Record<string, unknown> = {}) => ({
  mail_owner: "owner@example.com",
  name: "Team Sync",
  duration: 60,
  start_time: "2030-01-15T10:00",
  timezone: "America/New_York",
  ...overrides,
});

/** Opens a room as Prosody would (form-encoded), answering the UTC instant the reservation became. */
async function openedAt(account: Account, name: string, startTime: string, owner = "owner@example.com") {
  const body = new URLSearchParams({ name, start_time: startTime, mail_owner: owner }).toString();
  return call("POST", `${API}/conference`, {
    headers: { ...as(account), "content-type": "application/x-www-form-urlencoded" },
    raw: body,
  });
}

describe("reservations", () => {
  let a: Account;
  let b: Account;

  beforeAll(async () => {
    [a, b] = await Promise.all([newAccount(), newAccount()]);
  });

  test("POST creates a reservation and gives the times back as they came in", async () => {
    const answer = await reserve(
      a,
      booking({ start_time: "2030-01-15T10:00", timezone: "America/New York", duration: "45", pin: "1234ab" }),
    );
    expect(answer.status).toBe(200);
    expect(answer.body).toEqual({
      id: expect.any(Number),
      name: "Team Sync",
      room_key: "team%20sync",
      mail_owner: "owner@example.com",
      start_time: "2030-01-15T10:00",
      duration: 45,
      timezone: "America/New York",
      pin: "1234ab",
    });
    const defaults = await reserve(
      a,
      booking({ name: "Defaults", timezone: undefined, start_time: "2030-01-15T10:00:30" }),
    );
    expect(defaults.status).toBe(200);
    expect(defaults.body).toMatchObject({
      timezone: "America/New_York",
      start_time: "2030-01-15T10:00:30",
      duration: 60,
    });
    expect(defaults.body.pin).toBeUndefined();
  });

  test("a form-encoded reservation is read like JSON", async () => {
    const form = new URLSearchParams({
      mail_owner: "owner@example.com",
      name: "Form Room",
      duration: "30",
      start_time: "2030-04-01T08:00",
      timezone: "Europe/Berlin",
    });
    const answer = await call("POST", `${API}/reservation`, {
      headers: { ...as(a), "content-type": "application/x-www-form-urlencoded" },
      raw: form.toString(),
    });
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({
      name: "Form Room",
      room_key: "form%20room",
      duration: 30,
      start_time: "2030-04-01T08:00",
      timezone: "Europe/Berlin",
    });
  });

  test("a name is kept as typed (any printable Unicode) beside the room key jitsi-meet gives the room", async () => {
    for (const [name, key] of [
      ["Café", "caf%c3%a9"],
      ["Ｄｅｓｉｇｎ Review", "design%20review"],
      ["bad/name", "bad%2fname"],
      ["dots.are.allowed", "dots.are.allowed"],
      ["100% sure", "100%25%20sure"],
      ["会议", "%e4%bc%9a%e8%ae%ae"],
      // A zero-width non-joiner belongs to the Persian word.
      ["می\u200cروم", encodeURIComponent("می\u200cروم").toLowerCase()],
    ]) {
      const answer = await reserve(a, booking({ name, start_time: "2034-02-02T10:00" }));
      expect(answer.status, name).toBe(200);
      expect(answer.body).toMatchObject({ name, room_key: key });
      const byRoom = await call("GET", `${API}/reservation/room/${encodeURIComponent(name)}`, { headers: as(a) });
      expect(byRoom.body.id).toBe(answer.body.id);
    }
  });

  test("GET by id, by room (any spelling of its room key), and the list", async () => {
    const created = (await reserve(a, booking({ name: "Board Review", start_time: "2031-03-01T09:00" }))).body;
    const byId = await call("GET", `${API}/reservation/${created.id}`, { headers: as(a) });
    expect(byId.status).toBe(200);
    expect(byId.body).toEqual(created);
    // As a cjson-based Prosody module writes an id back: 1.0.
    expect((await call("GET", `${API}/reservation/${created.id}.0`, { headers: as(a) })).body).toEqual(created);
    for (const room of ["board%20review", "Board%20Review", "BOARD%2520REVIEW", encodeURIComponent("Board Review")]) {
      const byRoom = await call("GET", `${API}/reservation/room/${room}`, { headers: as(a) });
      expect(byRoom.status, room).toBe(200);
      expect(byRoom.body).toEqual(created);
    }
    const list = await call("GET", `${API}/reservation`, { headers: as(a) });
    expect(list.status).toBe(200);
    expect(list.body).toContainEqual(created);
  });

  test("by room gives the running or next reservation, else the last one", async () => {
    const account = await newAccount();
    const past = (await reserve(account, booking({ name: "cycle", start_time: "2001-01-01T10:00" }))).body;
    expect((await call("GET", `${API}/reservation/room/cycle`, { headers: as(account) })).body).toEqual(past);
    const later = (await reserve(account, booking({ name: "cycle", start_time: "2090-01-01T10:00" }))).body;
    const sooner = (await reserve(account, booking({ name: "cycle", start_time: "2080-01-01T10:00" }))).body;
    expect((await call("GET", `${API}/reservation/room/cycle`, { headers: as(account) })).body).toEqual(sooner);
    // The list is earliest first.
    expect((await call("GET", `${API}/reservation`, { headers: as(account) })).body).toEqual([past, sooner, later]);
  });

  test("DELETE returns the deleted record, after which the id is 404", async () => {
    const created = (await reserve(a, booking({ name: "Short Lived", start_time: "2032-05-05T12:00" }))).body;
    const deleted = await call("DELETE", `${API}/reservation/${created.id}`, { headers: as(a) });
    expect(deleted.status).toBe(200);
    expect(deleted.body).toEqual(created);
    expect((await call("GET", `${API}/reservation/${created.id}`, { headers: as(a) })).status).toBe(404);
    expect((await call("DELETE", `${API}/reservation/${created.id}`, { headers: as(a) })).status).toBe(404);
    expect((await call("GET", `${API}/reservation/room/short_lived`, { headers: as(a) })).status).toBe(404);
    // The room's time is free again.
    expect((await reserve(a, booking({ name: "Short Lived", start_time: "2032-05-05T12:00" }))).status).toBe(200);
  });

  test("an overlapping reservation of the same room is 409 with conflict_id", async () => {
    const account = await newAccount();
    const first = (await reserve(account, booking({ name: "Overlap", start_time: "2030-06-01T10:00", duration: 60 })))
      .body;
    const clash = await reserve(account, booking({ name: "overlap", start_time: "2030-06-01T10:59", duration: 30 }));
    expect(clash.status).toBe(409);
    expect(clash.body.conflict_id).toBe(first.id);
    expect(clash.body.error.code).toBe("conflict");
    // The same instant written in another zone (10:30 EDT is 14:30 UTC) still clashes.
    const elsewhere = await reserve(
      account,
      booking({ name: "Overlap", start_time: "2030-06-01T14:30", timezone: "UTC", duration: 5 }),
    );
    expect(elsewhere.status).toBe(409);
    expect(elsewhere.body.conflict_id).toBe(first.id);
    // Back to back is no overlap; nor is another room, nor the same room in another account.
    expect(
      (await reserve(account, booking({ name: "Overlap", start_time: "2030-06-01T11:00", duration: 30 }))).status,
    ).toBe(200);
    expect(
      (await reserve(account, booking({ name: "Overlap", start_time: "2030-06-01T09:30", duration: 30 }))).status,
    ).toBe(200);
    expect((await reserve(account, booking({ name: "Other Room", start_time: "2030-06-01T10:00" }))).status).toBe(200);
    expect((await reserve(b, booking({ name: "Overlap", start_time: "2030-06-01T10:00" }))).status).toBe(200);
  });

  test("concurrent overlapping reservations: exactly one wins", async () => {
    const account = await newAccount();
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        reserve(account, booking({ name: "Race", start_time: `2030-09-09T10:0${i}` })),
      ),
    );
    expect(answers.filter((answer) => answer.status === 200)).toHaveLength(1);
    expect(answers.filter((answer) => answer.status === 409)).toHaveLength(5);
  });

  const failures: Array<[string, Record<string, unknown>, number]> = [
    ["mail_owner", { mail_owner: "not-an-address" }, 422],
    ["mail_owner", { mail_owner: "two@@example.com" }, 422],
    ["mail_owner", { mail_owner: undefined }, 400],
    ["mail_owner", { mail_owner: 7 }, 400],
    ["name", { name: "" }, 422],
    ["name", { name: "   " }, 422],
    ["name", { name: "tab\there" }, 422],
    ["name", { name: "bell\u0007" }, 422],
    ["name", { name: "line\u2028break" }, 422],
    ["name", { name: "\u4e2d".repeat(200) }, 422],
    ["name", { name: "x".repeat(256) }, 400],
    ["name", { name: undefined }, 400],
    ["duration", { duration: 0 }, 422],
    ["duration", { duration: -5 }, 422],
    ["duration", { duration: "abc" }, 422],
    ["duration", { duration: "" }, 422],
    ["duration", { duration: "1e3" }, 422],
    ["duration", { duration: 1_000_000 }, 422],
    ["duration", { duration: undefined }, 400],
    ["duration", { duration: true }, 400],
    ["start_time", { start_time: "tomorrow" }, 422],
    ["start_time", { start_time: "2030-13-01T10:00" }, 422],
    ["start_time", { start_time: "2030-02-30T10:00" }, 422],
    ["start_time", { start_time: "2030-01-15T24:00" }, 422],
    ["start_time", { start_time: "2030-01-15 10:00" }, 422],
    ["start_time", { start_time: "2030-01-15" }, 422],
    ["start_time", { start_time: undefined }, 400],
    ["timezone", { timezone: "Mars/Olympus_Mons" }, 422],
    ["timezone", { timezone: "New York" }, 422],
    ["pin", { pin: "12-34" }, 422],
    ["pin", { pin: "x".repeat(33) }, 400],
  ];
  for (const [field, change, status] of failures) {
    test(`${JSON.stringify(change)} is ${status} naming ${field}`, async () => {
      const answer = await reserve(a, booking({ name: "Validation", ...change }));
      expect(answer.status).toBe(status);
      expect(answer.body.error.message).toContain(field);
    });
  }

  test("a body that is not JSON is 400; no API key is 401", async () => {
    const broken = await call("POST", `${API}/reservation`, {
      headers: { ...as(a), "content-type": "application/json" },
      raw: "{",
    });
    expect(broken.status).toBe(400);
    expect((await call("GET", `${API}/reservation`)).status).toBe(401);
    expect((await call("GET", `${API}/reservation`, { headers: { authorization: "Bearer prl_nope" } })).status).toBe(
      401,
    );
  });

  test("another account's reservations are 404 and never listed", async () => {
    const mine = (await reserve(a, booking({ name: "Private", start_time: "2033-01-01T10:00" }))).body;
    const theirs = { headers: as(b) };
    expect((await call("GET", `${API}/reservation/${mine.id}`, theirs)).status).toBe(404);
    expect((await call("DELETE", `${API}/reservation/${mine.id}`, theirs)).status).toBe(404);
    expect((await call("GET", `${API}/reservation/room/private`, theirs)).status).toBe(404);
    expect(
      ((await call("GET", `${API}/reservation`, theirs)).body as Array<{ id: number }>).map((r) => r.id),
    ).not.toContain(mine.id);
    expect((await call("GET", `${API}/reservation/${mine.id}`, { headers: as(a) })).status).toBe(200);
  });

  test("ids that are not ids are 404, never 500", async () => {
    for (const id of ["abc", "-1", "0", "1.5", "99999999999", "2147483648"]) {
      expect((await call("GET", `${API}/reservation/${id}`, { headers: as(a) })).status, id).toBe(404);
      expect((await call("GET", `${API}/conference/${id}`, { headers: as(a) })).status, id).toBe(404);
    }
  });

  test("start_time is read in the reservation's time zone, daylight saving included", async () => {
    const account = await newAccount();
    const cases: Array<[string, string, string]> = [
      ["2030-01-15T10:00", "America/New_York", "2030-01-15T15:00:00.000Z"],
      ["2030-07-15T10:00", "America/New_York", "2030-07-15T14:00:00.000Z"],
      ["2030-07-15T10:00", "America/New York", "2030-07-15T14:00:00.000Z"],
      ["2030-07-15T10:00:45", "Asia/Kolkata", "2030-07-15T04:30:45.000Z"],
      ["2030-07-15T10:00", "UTC", "2030-07-15T10:00:00.000Z"],
      // Clocks go back on 2030-11-03 in New York: 01:30 comes twice; the first (EDT) is meant.
      ["2030-11-03T01:30", "America/New_York", "2030-11-03T05:30:00.000Z"],
      // Europe goes back on 2030-10-27: 02:30 is first 00:30 UTC (CEST), then 01:30 UTC (CET).
      ["2030-10-27T02:30", "Europe/Berlin", "2030-10-27T00:30:00.000Z"],
      ["2030-03-31T02:30", "Europe/Berlin", "2030-03-31T01:30:00.000Z"],
      ["2030-07-15T10:00", "Australia/Lord_Howe", "2030-07-14T23:30:00.000Z"],
      // Clocks go forward on 2030-03-10: 02:30 never happens there and moves on by the hour skipped.
      ["2030-03-10T02:30", "America/New_York", "2030-03-10T07:30:00.000Z"],
    ];
    for (const [index, [startTime, timezone, utc]] of cases.entries()) {
      const room = `zone${index}`;
      expect((await reserve(account, booking({ name: room, start_time: startTime, timezone }))).status).toBe(200);
      // One millisecond before the instant it means, the reservation has not started...
      const early = new Date(Date.parse(utc) - 1).toISOString();
      expect((await openedAt(account, room, early)).status, `${startTime} ${timezone}`).toBe(403);
      // ...and at that instant Prosody may open the room, and is told when it started.
      const opened = await openedAt(account, room, utc);
      expect(opened.status, `${startTime} ${timezone}`).toBe(200);
      expect(opened.body.start_time).toBe(utc);
    }
  });

  test("a start_time with an offset and no timezone is answered with the offset it was read with", async () => {
    const account = await newAccount();
    const cases: Array<[string, string, string]> = [
      ["2030-07-15T10:00Z", "UTC", "2030-07-15T10:00:00.000Z"],
      ["2030-07-15T10:00:00.000+05:30", "+05:30", "2030-07-15T04:30:00.000Z"],
      ["2030-07-15T10:00-0300", "-03:00", "2030-07-15T13:00:00.000Z"],
    ];
    for (const [index, [startTime, timezone, utc]] of cases.entries()) {
      const room = `offset${index}`;
      const { timezone: _default, ...noZone } = booking({ name: room, start_time: startTime });
      const created = await reserve(account, noZone);
      expect(created.status).toBe(200);
      expect(created.body.timezone).toBe(timezone);
      expect((await call("GET", `${API}/reservation/${created.body.id}`, { headers: as(account) })).body.timezone).toBe(
        timezone,
      );
      expect((await openedAt(account, room, new Date(Date.parse(utc) - 1).toISOString())).status).toBe(403);
      expect((await openedAt(account, room, utc)).status).toBe(200);
    }
    // A zone given beside an offset is answered as given, as before.
    const both = await reserve(
      account,
      booking({ name: "offset-both", start_time: "2030-07-15T10:00Z", timezone: "Europe/Berlin" }),
    );
    expect(both.body.timezone).toBe("Europe/Berlin");
  });
});
