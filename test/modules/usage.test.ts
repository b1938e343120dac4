import { beforeAll, describe, expect, test } from "bun:test";
import { eq, sql } from "drizzle-orm";
import { db } from "../../src/db/client";
import { rowsOf } from "../../src/db/rows";
import { conferenceEvents } from "../../src/modules/conference-log/schema";
import { appendEvent, type ConferenceEvent } from "../../src/modules/conference-log/service";
import { foldEventIds, refoldLog } from "../../src/modules/usage/fold";
import { call, newAccount, tokenFor } from "../helpers";
import { foldQueued } from "../support/cdr-worker";
import {
  at,
  type Delivery,
  deliver,
  occupantJoined,
  occupantLeft,
  type Person,
  roomCreated,
  roomDestroyed,
} from "../support/event-sync";
import { adminCli } from "../support/admin-cli";

const ROUTE = "/api/v1/pricing/cdr";
const DAY = { start_date: "2026-11-20T00:00:00Z", end_date: "2026-11-21T00:00:00Z" };

const alice: Person = {
  name: "Alice",
  email: "alice@example.com",
  id: "alice",
  occupant_jid: "a1@meet.example.com/Aa1",
};
const bob: Person = { name: "Bob", email: "bob@example.com", id: "bob", occupant_jid: "b1@meet.example.com/Bb1" };
const carol: Person = {
  name: "Carol",
  email: "carol@example.com",
  id: "carol",
  occupant_jid: "c1@meet.example.com/Cc1",
};
const dave1: Person = { name: "Dave", id: "dave", occupant_jid: "d1@meet.example.com/Dd1" };
const dave2: Person = { name: "Dave", id: "dave", occupant_jid: "d1@meet.example.com/Dd2" };
const erin: Person = { name: "Erin", id: "erin", occupant_jid: "e1@meet.example.com/Ee1" };
const frank: Person = { name: "Frank", id: "frank", occupant_jid: "f1@meet.example.com/Ff1" };
const guest: Person = { occupant_jid: "0c4e2b@meet.example.com/Gg1" };

/**
 * A day of event_sync traffic in the order it reached Parley: retried deliveries, leaves
 * before their joins, a breakout room destroyed before it was created, and Carol's leave
 * never sent (the room's destroy lists her without left_at).
 */
function jitsiDay(): Delivery[] {
  const standup = at("09:00:00");
  const sales = at("14:00:00");
  const breakout = at("14:10:00");
  const night = at("23:30:00");
  return [
    roomCreated("standup", standup),
    occupantJoined("standup", alice, at("09:00:10"), 1),
    occupantLeft("standup", bob, at("09:01:00"), at("09:31:00"), 2),
    occupantJoined("standup", bob, at("09:01:00"), 2),
    occupantJoined("standup", carol, at("09:05:00"), 3),
    occupantJoined("standup", dave1, at("09:10:00"), 4),
    occupantJoined("standup", bob, at("09:01:00"), 2),
    occupantLeft("standup", dave1, at("09:10:00"), at("09:20:00"), 3),
    occupantJoined("standup", dave2, at("09:25:00"), 4),
    occupantLeft("standup", alice, at("09:00:10"), at("09:30:10"), 3),
    occupantLeft("standup", dave2, at("09:25:00"), at("09:40:00"), 1),
    roomDestroyed("standup", standup, at("09:45:00"), [
      { ...alice, joined_at: at("09:00:10"), left_at: at("09:30:10") },
      { ...bob, joined_at: at("09:01:00"), left_at: at("09:31:00") },
      { ...carol, joined_at: at("09:05:00") },
      { ...dave1, joined_at: at("09:10:00"), left_at: at("09:20:00") },
      { ...dave2, joined_at: at("09:25:00"), left_at: at("09:40:00") },
    ]),
    roomDestroyed("standup", standup, at("09:45:00"), []),

    roomCreated("Sales", sales),
    occupantJoined("sales", erin, at("14:00:30"), 1),
    occupantJoined("sales", frank, at("14:02:00"), 2),
    roomDestroyed(
      "sales",
      breakout,
      at("14:40:05"),
      [{ ...erin, joined_at: at("14:10:05"), left_at: at("14:40:05") }],
      "b1",
    ),
    occupantLeft("sales", erin, at("14:00:30"), at("14:10:00"), 1),
    roomCreated("sales", breakout, "b1"),
    occupantJoined("sales", erin, at("14:10:05"), 1, "b1"),
    occupantLeft("sales", erin, at("14:10:05"), at("14:40:05"), 0, "b1"),
    occupantJoined("sales", erin, at("14:40:10"), 2),
    occupantLeft("sales", frank, at("14:02:00"), at("14:50:00"), 1),
    occupantLeft("sales", erin, at("14:40:10"), at("14:55:10"), 0),
    roomDestroyed("sales", sales, at("14:55:10"), [
      { ...erin, joined_at: at("14:00:30"), left_at: at("14:10:00") },
      { ...frank, joined_at: at("14:02:00"), left_at: at("14:50:00") },
      { ...erin, joined_at: at("14:40:10"), left_at: at("14:55:10") },
    ]),

    roomCreated("night", night),
    occupantJoined("night", guest, night, 1),
    occupantLeft("night", guest, night, at("+1 00:30:00"), 0),
    roomDestroyed("night", night, at("+1 00:30:00"), [{ ...guest, joined_at: night, left_at: at("+1 00:30:00") }]),
  ];
}

/** What the streaming and SIP features append for the standup room (stream stop logged before its start). */
function parleyFacts(accountId: string): ConferenceEvent[] {
  const event = (
    kind: ConferenceEvent["kind"],
    time: string,
    subject: string,
    payload: Record<string, unknown> = {},
  ): ConferenceEvent => ({
    accountId,
    kind,
    room: "standup",
    occurredAt: new Date(at(time) * 1000),
    subject,
    payload,
    dedupeKey: `${kind}|${subject}|${time}`,
  });
  return [
    event("stream_stopped", "09:35:00", "standup-live", { recording: true }),
    event("stream_started", "09:15:00", "standup-live", { recording: true }),
    event("viewers_changed", "09:16:00", "standup-live", { viewers: 5 }),
    event("viewers_changed", "09:20:00", "standup-live", { viewers: 12 }),
    event("viewers_changed", "09:30:00", "standup-live", { viewers: 7 }),
    event("call_started", "09:12:00", "c-1@gw.example.com", {
      caller: "+493012345",
      callee: "standup",
      answered: true,
      reason: null,
    }),
    event("call_ended", "09:22:00", "c-1@gw.example.com", {
      caller: "+493012345",
      callee: "standup",
      answered: true,
      reason: "hangup",
    }),
    event("call_ended", "09:40:00", "c-2@gw.example.com", {
      caller: "+441234",
      callee: "standup",
      answered: false,
      reason: "busy",
    }),
  ];
}

async function replay(account: { accountId: string; apiKey: string }) {
  for (const delivery of jitsiDay()) {
    const answer = await deliver(account.apiKey, delivery);
    if (answer.status !== 200) throw new Error(`delivery refused: ${JSON.stringify(answer.body)}`);
  }
  for (const fact of parleyFacts(account.accountId)) await appendEvent(fact);
}

const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`;
/** The replayed day's report of an account, asked with its id and API key as Basic credentials. */
const dayReport = (account: { accountId: string; apiKey: string }) =>
  call("POST", ROUTE, { body: DAY, headers: { authorization: basic(account.accountId, account.apiKey) } });
const minutes = (seconds: number) => Math.round((seconds / 60) * 100) / 100;

/** The report without what depends on when the test ran. */
function comparable(report: any) {
  return {
    ...report,
    as_of: "-",
    rooms: report.rooms.map((room: any) => ({
      ...room,
      room_details: { ...room.room_details, OwnerId: "-" },
      CreatedAt: "-",
      UpdatedAt: "-",
    })),
  };
}

describe("POST /api/v1/pricing/cdr over a replayed day", () => {
  let acme: Awaited<ReturnType<typeof newAccount>>;
  let rival: Awaited<ReturnType<typeof newAccount>>;
  let report: any;

  beforeAll(async () => {
    [acme, rival] = await Promise.all([newAccount(), newAccount()]);
    await replay(acme);
    // The other account uses the same room name the same morning.
    await deliver(rival.apiKey, roomCreated("standup", at("09:00:00")));
    await deliver(
      rival.apiKey,
      occupantJoined("standup", { id: "zed", occupant_jid: "z@meet.example.com/Z" }, at("09:02:00"), 1),
    );
    await foldQueued();
    const answer = await dayReport(acme);
    expect(answer.status).toBe(200);
    report = answer.body;
  }, 30_000);

  test("lists each meeting of the day, oldest first, breakout rooms as their own entries", () => {
    expect(
      report.rooms.map((room: any) => [
        room.room_id,
        room.room_type,
        room.room_details.MeetingId,
        room.status,
        room.StartedAt,
        room.EndedAt,
      ]),
    ).toEqual([
      [
        "standup",
        "conference",
        `standup@${at("09:00:00")}`,
        "inactive",
        "2026-11-20T09:00:00.000Z",
        "2026-11-20T09:45:00.000Z",
      ],
      [
        "sales",
        "conference",
        `sales@${at("14:00:00")}`,
        "inactive",
        "2026-11-20T14:00:00.000Z",
        "2026-11-20T14:55:10.000Z",
      ],
      [
        "sales",
        "breakout",
        `sales/b1@${at("14:10:00")}`,
        "inactive",
        "2026-11-20T14:10:00.000Z",
        "2026-11-20T14:40:05.000Z",
      ],
      [
        "night",
        "conference",
        `night@${at("23:30:00")}`,
        "inactive",
        "2026-11-20T23:30:00.000Z",
        "2026-11-21T00:30:00.000Z",
      ],
    ]);
    for (const room of report.rooms) {
      expect(room.room_details.OwnerId).toBe(acme.accountId);
      expect(room.room_details.AppId).toBe("conference.meet.example.com");
      expect(room.inferred).toBe(false);
    }
  });

  test("each stay is listed once with its minutes; the missing leave is closed at the room's end and marked", () => {
    const standup = report.rooms[0];
    expect(
      standup.users.map((user: any) => [
        user.user_id,
        user.joined_at.slice(11, 19),
        user.left_at.slice(11, 19),
        user.minutes,
        user.left_estimated,
      ]),
    ).toEqual([
      ["alice", "09:00:10", "09:30:10", 30, false],
      ["bob", "09:01:00", "09:31:00", 30, false],
      ["carol", "09:05:00", "09:45:00", 40, true],
      ["dave", "09:10:00", "09:20:00", 10, false],
      ["dave", "09:25:00", "09:40:00", 15, false],
    ]);
    expect(standup.users[0]).toMatchObject({
      name: "Alice",
      email: "alice@example.com",
      occupant_jid: alice.occupant_jid,
    });
    expect(report.rooms[3].users[0]).toMatchObject({
      user_id: null,
      name: null,
      email: null,
      occupant_jid: guest.occupant_jid,
      minutes: 60,
    });
  });

  test("room totals match the hand count", () => {
    // standup: alice 1800 s + bob 1800 + carol 2400 (to the room's end) + dave 600 + 900.
    // Alice, Bob, Carol and Dave are all in from 09:10 to 09:20: a peak of four.
    expect(report.rooms[0].media_usage).toMatchObject({
      participant_minutes: minutes(1800 + 1800 + 2400 + 600 + 900),
      phone_minutes: 10,
      streaming_minutes: 20,
      recording_minutes: 20,
      peak_participants: 4,
      distinct_participants: 4,
      peak_viewers: 12,
    });
    // sales main room: erin 570 s + 900 s, frank 2880 s; breakout: erin 1800 s.
    expect(report.rooms[1].media_usage).toMatchObject({
      participant_minutes: minutes(570 + 900 + 2880),
      peak_participants: 2,
      distinct_participants: 2,
    });
    expect(report.rooms[2].media_usage).toMatchObject({
      participant_minutes: 30,
      peak_participants: 1,
      distinct_participants: 1,
    });
    expect(report.rooms[3].media_usage).toMatchObject({
      participant_minutes: 60,
      peak_participants: 1,
      phone_minutes: 0,
    });
  });

  test("streams, recordings and calls are listed under the meeting they happened in", () => {
    const { streams, calls } = report.rooms[0].media_usage;
    expect(streams).toEqual([
      {
        stream_name: "standup-live",
        kind: "streaming",
        started_at: "2026-11-20T09:15:00.000Z",
        ended_at: "2026-11-20T09:35:00.000Z",
        minutes: 20,
        peak_viewers: 12,
      },
      {
        stream_name: "standup-live",
        kind: "recording",
        started_at: "2026-11-20T09:15:00.000Z",
        ended_at: "2026-11-20T09:35:00.000Z",
        minutes: 20,
        peak_viewers: 0,
      },
    ]);
    expect(calls.sort((a: any, b: any) => a.call_id.localeCompare(b.call_id))).toEqual([
      {
        call_id: "c-1@gw.example.com",
        caller: "+493012345",
        callee: "standup",
        answered: true,
        reason: "hangup",
        started_at: "2026-11-20T09:12:00.000Z",
        ended_at: "2026-11-20T09:22:00.000Z",
        minutes: 10,
      },
      {
        call_id: "c-2@gw.example.com",
        caller: "+441234",
        callee: "standup",
        answered: false,
        reason: "busy",
        started_at: "2026-11-20T09:40:00.000Z",
        ended_at: "2026-11-20T09:40:00.000Z",
        minutes: 0,
      },
    ]);
  });

  test("overall totals and the per-day rows match the hand count", () => {
    expect(report.totals).toEqual({
      rooms: 4,
      participant_minutes: minutes(7500 + 4350 + 1800 + 3600),
      phone_minutes: 10,
      streaming_minutes: 20,
      recording_minutes: 20,
      peak_participants: 4,
      distinct_participants: 7,
      open_stays: 0,
    });
    // Days are UTC and hold the listed meetings: the night room's
    // stay is split at midnight, its second half on the 21st.
    expect(report.days).toEqual([
      {
        room_name: "night",
        date: "2026-11-20",
        participant_minutes: 30,
        peak_participants: 1,
        distinct_participants: 1,
        phone_minutes: 0,
        streaming_minutes: 0,
        recording_minutes: 0,
        peak_viewers: 0,
      },
      // Breakout stays count toward the main room's day: Erin (in the breakout) and Frank overlap.
      {
        room_name: "sales",
        date: "2026-11-20",
        participant_minutes: minutes(4350 + 1800),
        peak_participants: 2,
        distinct_participants: 2,
        phone_minutes: 0,
        streaming_minutes: 0,
        recording_minutes: 0,
        peak_viewers: 0,
      },
      {
        room_name: "standup",
        date: "2026-11-20",
        participant_minutes: 125,
        peak_participants: 4,
        distinct_participants: 4,
        phone_minutes: 10,
        streaming_minutes: 20,
        recording_minutes: 20,
        peak_viewers: 12,
      },
      {
        room_name: "night",
        date: "2026-11-21",
        participant_minutes: 30,
        peak_participants: 1,
        distinct_participants: 1,
        phone_minutes: 0,
        streaming_minutes: 0,
        recording_minutes: 0,
        peak_viewers: 0,
      },
    ]);
    // The days add up to the totals.
    const sum = (field: string) => minutes(report.days.reduce((total: number, day: any) => total + day[field] * 60, 0));
    expect([
      sum("participant_minutes"),
      sum("phone_minutes"),
      sum("streaming_minutes"),
      sum("recording_minutes"),
    ]).toEqual([
      report.totals.participant_minutes,
      report.totals.phone_minutes,
      report.totals.streaming_minutes,
      report.totals.recording_minutes,
    ]);
  });

  test("room_name narrows the report, case-insensitively", async () => {
    const answer = await call("POST", ROUTE, {
      body: { ...DAY, room_name: ["SALES", "nowhere"] },
      headers: { authorization: basic(acme.accountId, acme.apiKey) },
    });
    expect(answer.body.rooms.map((room: any) => room.room_details.MeetingId)).toEqual([
      `sales@${at("14:00:00")}`,
      `sales/b1@${at("14:10:00")}`,
    ]);
    expect(answer.body.totals.participant_minutes).toBe(minutes(4350 + 1800));
    expect(answer.body.days.map((day: any) => day.room_name)).toEqual(["sales"]);
  });

  test("a meeting and its days belong to its start's window: the next day's has none of the night room", async () => {
    const answer = await call("POST", ROUTE, {
      body: { start_date: "2026-11-21T00:00:00Z", end_date: "2026-11-22T00:00:00Z" },
      headers: { authorization: basic(acme.accountId, acme.apiKey) },
    });
    expect(answer.body.rooms).toEqual([]);
    expect(answer.body.days).toEqual([]);
    expect(answer.body.totals).toMatchObject({ rooms: 0, participant_minutes: 0 });
  });

  test("folding the whole log again changes nothing", async () => {
    await refoldLog({ pageSize: 7 });
    const again = await dayReport(acme);
    expect(comparable(again.body)).toEqual(comparable(report));
  }, 30_000);

  /** As after restoring the log alone from a backup: the account's folded usage is gone. */
  const dropFoldedUsage = async () => {
    for (const table of ["participant_sessions", "room_sessions", "media_sessions", "room_usage_daily"]) {
      await db.execute(sql`delete from ${sql.identifier(table)} where account_id = ${acme.accountId}`);
    }
  };

  test("a refold that lists the log one room at a time folds every room", async () => {
    await dropFoldedUsage();
    // Nothing is listed as unfolded, so the report's read-after-write step cannot fold a room the listings missed.
    expect(await refoldLog({ accountId: acme.accountId, pageSize: 7, roomsPerListing: 1 })).toBeGreaterThan(0);
    const again = await dayReport(acme);
    expect(comparable(again.body)).toEqual(comparable(report));
  }, 30_000);

  test("`parley refold-usage` rebuilds one account's usage from its log and leaves the others' alone", async () => {
    await dropFoldedUsage();
    // A refold rewrites every stay it folds (updated_at): the other account's must not move.
    const rivalStays = async () =>
      rowsOf(
        await db.execute(
          sql`select occupant_jid, updated_at from participant_sessions where account_id = ${rival.accountId}`,
        ),
      );
    const rivalBefore = await rivalStays();
    expect(rivalBefore.length).toBe(1);
    const emptied = await dayReport(acme);
    expect(emptied.body.days).toEqual([]);
    // And its events listed as unfolded again, as after a long outage of every cdr worker: a refold takes them off.
    await db.execute(sql`insert into conference_events_unfolded (event_id, account_id, room)
      select id, account_id, room from conference_events where account_id = ${acme.accountId}`);

    const cli = adminCli("refold-usage", acme.accountId);
    const stored = (
      await db
        .select({ id: conferenceEvents.id })
        .from(conferenceEvents)
        .where(eq(conferenceEvents.accountId, acme.accountId))
    ).length;
    expect({ code: cli.code, out: cli.out }).toEqual({
      code: 0,
      out: expect.stringContaining(`folded ${stored} events again`),
    });
    // Checked before the report, whose read-after-write step would fold what is still listed.
    const listed = await db.execute(
      sql`select count(*)::int as n from conference_events_unfolded where account_id = ${acme.accountId}`,
    );
    expect(rowsOf<{ n: number }>(listed)[0]!.n).toBe(0);
    const again = await dayReport(acme);
    expect(comparable(again.body)).toEqual(comparable(report));
    expect(await rivalStays()).toEqual(rivalBefore);
  }, 30_000);

  test("the same traffic folded one event at a time in reverse order gives the same report", async () => {
    const mirror = await newAccount();
    await replay(mirror);
    const ids = (
      await db
        .select({ id: conferenceEvents.id })
        .from(conferenceEvents)
        .where(eq(conferenceEvents.accountId, mirror.accountId))
    ).map((row) => row.id);
    for (const id of ids.reverse()) await foldEventIds([id]);
    const answer = await dayReport(mirror);
    expect(comparable(answer.body)).toEqual(comparable(report));
  }, 30_000);

  test("the other account's room of the same name never appears, and it sees only its own", async () => {
    expect(report.rooms.flatMap((room: any) => room.users.map((user: any) => user.user_id))).not.toContain("zed");
    const theirs = await call("POST", ROUTE, {
      body: DAY,
      headers: { authorization: `Bearer ${await tokenFor(rival.apiKey, { id: "ops" }, "parley")}` },
    });
    expect(theirs.status).toBe(200);
    expect(theirs.body.rooms).toHaveLength(1);
    expect(theirs.body.rooms[0]).toMatchObject({
      room_id: "standup",
      status: "active",
      EndedAt: null,
      room_details: { OwnerId: rival.accountId },
    });
    expect(theirs.body.rooms[0].users.map((user: any) => [user.user_id, user.left_at])).toEqual([["zed", null]]);
  });

  test("a leave that arrives after the room's end replaces the estimate", async () => {
    await deliver(acme.apiKey, occupantLeft("standup", carol, at("09:05:00"), at("09:44:00"), 0));
    await foldQueued();
    const answer = await call("POST", ROUTE, {
      body: { ...DAY, room_name: ["standup"] },
      headers: { authorization: basic(acme.accountId, acme.apiKey) },
    });
    const carolStay = answer.body.rooms[0].users.find((user: any) => user.user_id === "carol");
    expect(carolStay).toMatchObject({ left_at: "2026-11-20T09:44:00.000Z", left_estimated: false, minutes: 39 });
    expect(answer.body.rooms[0].media_usage.participant_minutes).toBe(124);
    expect(answer.body.days[0].participant_minutes).toBe(124);
  }, 30_000);

  test("Accept: text/csv gives one line per stay with the room's columns", async () => {
    const answer = await call("POST", ROUTE, {
      body: DAY,
      headers: { authorization: basic(acme.accountId, acme.apiKey), accept: "text/csv" },
    });
    expect(answer.status).toBe(200);
    expect(answer.headers.get("content-type")).toStartWith("text/csv");
    const lines = (answer.body as string).trimEnd().split("\r\n");
    const header = lines[0]!.split(",");
    expect(header.slice(0, 4)).toEqual(["room_id", "meeting_id", "room_type", "status"]);
    expect(lines).toHaveLength(1 + 5 + 3 + 1 + 1);
    const carolLine = Object.fromEntries(
      lines
        .find((line) => line.includes("carol@example.com"))!
        .split(",")
        .map((value, i) => [header[i], value]),
    );
    expect(carolLine).toMatchObject({
      room_id: "standup",
      user_id: "carol",
      user_name: "Carol",
      left_estimated: "false",
      user_minutes: "39",
      room_peak_participants: "4",
    });
  });
});

describe("POST /api/v1/pricing/cdr refuses", () => {
  let account: Awaited<ReturnType<typeof newAccount>>;
  let auth: Record<string, string>;
  beforeAll(async () => {
    account = await newAccount();
    auth = { authorization: basic(account.accountId, account.apiKey) };
  });

  const invalid: Array<[string, Record<string, unknown>, number, string]> = [
    [
      "a start_date after end_date",
      { start_date: "2026-11-21T00:00:00Z", end_date: "2026-11-20T00:00:00Z" },
      422,
      "start_date",
    ],
    ["a start_date that is no date", { start_date: "yesterday" }, 422, "start_date"],
    ["an end_date that is no date", { end_date: "2026-13-45T99:00:00Z" }, 422, "end_date"],
    ["a numeric end_date", { end_date: 1_700_000_000 }, 400, "end_date"],
    ["a room_name that is not an array", { room_name: "standup" }, 400, "room_name"],
    ["a room_name holding a number", { room_name: [42] }, 400, "room_name"],
    ["an empty room name in the list", { room_name: ["standup", " "] }, 422, "room_name"],
  ];
  for (const [what, body, status, field] of invalid) {
    test(`${what}: ${status} naming ${field}`, async () => {
      const answer = await call("POST", ROUTE, { body, headers: auth });
      expect(answer.status).toBe(status);
      expect(answer.body.error.message).toContain(field);
    });
  }

  test("no credential, a wrong API key, or a broken Basic header: 401", async () => {
    expect((await call("POST", ROUTE, { body: {} })).status).toBe(401);
    expect(
      (await call("POST", ROUTE, { body: {}, headers: { authorization: basic(account.accountId, "prl_wrong") } }))
        .status,
    ).toBe(401);
    expect((await call("POST", ROUTE, { body: {}, headers: { authorization: "Basic bm9jb2xvbg==" } })).status).toBe(
      401,
    );
  });

  test("a messaging token is 403; platform or empty scope, the API key as Bearer and curl's -u KEY: pass", async () => {
    const messaging = await tokenFor(account.apiKey, { id: "ops" }, "messaging");
    expect((await call("POST", ROUTE, { body: {}, headers: { authorization: `Bearer ${messaging}` } })).status).toBe(
      403,
    );
    for (const authorization of [
      `Bearer ${await tokenFor(account.apiKey, { id: "ops" }, "parley")}`,
      `Bearer ${await tokenFor(account.apiKey, { id: "ops" }, "")}`,
      `Bearer ${account.apiKey}`,
      basic(account.apiKey, ""),
    ]) {
      const answer = await call("POST", ROUTE, { body: {}, headers: { authorization } });
      expect(answer.status).toBe(200);
    }
  });

  test("an absent body means the last seven days of every room", async () => {
    const before = Date.now();
    const answer = await call("POST", ROUTE, { headers: auth });
    expect(answer.status).toBe(200);
    const span = Date.parse(answer.body.end_date) - Date.parse(answer.body.start_date);
    expect(span).toBe(7 * 86_400_000);
    expect(Date.parse(answer.body.end_date)).toBeGreaterThanOrEqual(before - 1000);
    expect(answer.body.rooms).toEqual([]);
  });
});

describe("folding odd events", () => {
  test("an occupant event without event_sync's payload is kept in the log and folds to nothing", async () => {
    const account = await newAccount();
    const bare = {
      accountId: account.accountId,
      room: "bare",
      occurredAt: new Date(at("10:00:00") * 1000),
      subject: "alice",
    };
    await appendEvent({ ...bare, kind: "occupant_joined", dedupeKey: "bare-join" });
    await appendEvent({
      ...bare,
      kind: "room_destroyed",
      dedupeKey: "bare-destroy",
      payload: { created_at: "yesterday" },
    });
    const ids = (
      await db
        .select({ id: conferenceEvents.id })
        .from(conferenceEvents)
        .where(eq(conferenceEvents.accountId, account.accountId))
    ).map((row) => row.id);
    expect(await foldEventIds(ids)).toBe(2);
    const answer = await call("POST", ROUTE, { body: DAY, headers: { authorization: `Bearer ${account.apiKey}` } });
    expect(answer.body.rooms).toEqual([]);
  });
});

describe("an account's usage", () => {
  test("goes with the account: its stays are deleted with it, another account's stay is kept", async () => {
    const [gone, kept] = [await newAccount(), await newAccount()];
    const stays = async (accountId: string) =>
      rowsOf<{ n: number }>(
        await db.execute(sql`select count(*)::int as n from participant_sessions where account_id = ${accountId}`),
      )[0]!.n;
    for (const account of [gone, kept])
      for (const delivery of [
        occupantJoined("leaving", alice, at("10:00:00"), 1),
        occupantLeft("leaving", alice, at("10:00:00"), at("10:20:00"), 0),
      ])
        expect((await deliver(account.apiKey, delivery)).status).toBe(200);
    const ids = rowsOf<{ id: number }>(
      await db.execute(
        sql`select id from conference_events where account_id in (${gone.accountId}, ${kept.accountId})`,
      ),
    ).map((row) => Number(row.id));
    expect(await foldEventIds(ids)).toBe(4);
    expect([await stays(gone.accountId), await stays(kept.accountId)]).toEqual([1, 1]);
    await db.execute(sql`delete from accounts where id = ${gone.accountId}`);
    expect([await stays(gone.accountId), await stays(kept.accountId)]).toEqual([0, 1]);
  });
});

describe("the OpenAPI document", () => {
  test("describes every field of the report and the event_sync routes", async () => {
    const spec = (await call("GET", "/swagger/json")).body;
    const operation = spec.paths["/api/v1/pricing/cdr"].post;
    const schema = operation.responses["200"].content["application/json"].schema;
    const report = schema.anyOf ? schema.anyOf[0] : schema;
    const undocumented: string[] = [];
    const walk = (node: any, path: string) => {
      if (node.description === undefined && path !== "report" && !path.endsWith("[]")) undocumented.push(path);
      for (const [name, child] of Object.entries(node.properties ?? {})) walk(child, `${path}.${name}`);
      if (node.items) walk(node.items, `${path}[]`);
    };
    walk(report, "report");
    expect(Object.keys(report.properties.rooms.items.properties.users.items.properties)).toContain("left_estimated");
    expect(undocumented).toEqual([]);
    for (const route of ["room/created", "room/destroyed", "occupant/joined", "occupant/left"]) {
      expect(spec.paths[`/api/v1/events/${route}`].post.requestBody).toBeDefined();
    }
  });
});
