/**
 * A stay left open when its room ended is closed at the room's end and marked estimated; a
 * leave reported later replaces the estimate, also when it is earlier by days: every day the
 * estimate reached is rebuilt in the daily usage (what usage.day_settled announces), not only
 * the days of the reported stay. The report's own days are computed from the stays each time.
 */
import { expect, test } from "bun:test";
import { and, asc, eq } from "drizzle-orm";
import { db } from "../../src/db/client";
import { refoldLog } from "../../src/modules/usage/fold";
import { roomUsageDaily } from "../../src/modules/usage/schema";
import { call, newAccount } from "../helpers";
import { foldQueued } from "../support/cdr-worker";
import {
  at,
  deliver,
  occupantJoined,
  occupantLeft,
  type Person,
  roomCreated,
  roomDestroyed,
} from "../support/event-sync";

const ann: Person = { name: "Ann", id: "ann", occupant_jid: "a1@meet.example.com/Aa1" };
const TWO_DAYS = { start_date: "2026-11-20T00:00:00Z", end_date: "2026-11-22T00:00:00Z" };

test("a reported leave a day before the estimated one empties the estimate's later day", async () => {
  const account = await newAccount();
  const report = async () => {
    const answer = await call("POST", "/api/v1/pricing/cdr", {
      body: { ...TWO_DAYS, room_name: ["late"] },
      headers: { authorization: `Bearer ${account.apiKey}` },
    });
    expect(answer.status).toBe(200);
    return answer.body.days.map((day: any) => [day.date, day.participant_minutes]);
  };
  const daily = async () =>
    (
      await db
        .select({ day: roomUsageDaily.day, seconds: roomUsageDaily.participantSeconds })
        .from(roomUsageDaily)
        .where(and(eq(roomUsageDaily.accountId, account.accountId), eq(roomUsageDaily.room, "late")))
        .orderBy(asc(roomUsageDaily.day))
    ).map((row) => [row.day, row.seconds / 60]);
  const created = at("22:00:00");
  for (const delivery of [
    roomCreated("late", created),
    occupantJoined("late", ann, at("22:30:00"), 1),
    // The room ends after midnight with Ann still listed: her stay is closed there, estimated.
    roomDestroyed("late", created, at("+1 02:00:00"), [{ ...ann, joined_at: at("22:30:00") }]),
  ])
    expect((await deliver(account.apiKey, delivery)).status).toBeLessThan(300);
  await foldQueued();
  const estimated = [
    ["2026-11-20", 90],
    ["2026-11-21", 120],
  ];
  expect(await report()).toEqual(estimated);
  expect(await daily()).toEqual(estimated);

  // Her leave, delivered late, was at 23:00 on the first day: the second day holds no stay any more.
  expect(
    (await deliver(account.apiKey, occupantLeft("late", ann, at("22:30:00"), at("23:00:00"), 0))).status,
  ).toBeLessThan(300);
  await foldQueued();
  expect(await report()).toEqual([["2026-11-20", 30]]);
  expect(await daily()).toEqual([["2026-11-20", 30]]);
}, 30_000);

test("a stay's name and id are the first its events gave, in the order they were stored", async () => {
  const account = await newAccount();
  const ben: Person = { occupant_jid: "b1@meet.example.com/Bb1" };
  const created = at("10:00:00");
  for (const delivery of [
    roomCreated("names", created),
    occupantJoined("names", ann, at("10:05:00"), 1),
    // Ben's join names nobody; his leave is the first to give his name and id.
    occupantJoined("names", ben, at("10:06:00"), 2),
    occupantLeft("names", { ...ann, name: "Ann Later", id: "ann-later" }, at("10:05:00"), at("10:30:00"), 1),
    occupantLeft("names", { ...ben, name: "Ben", id: "ben" }, at("10:06:00"), at("10:40:00"), 0),
    roomDestroyed("names", created, at("11:00:00"), []),
  ])
    expect((await deliver(account.apiKey, delivery)).status).toBeLessThan(300);
  const users = async () => {
    const answer = await call("POST", "/api/v1/pricing/cdr", {
      body: { ...TWO_DAYS, room_name: ["names"] },
      headers: { authorization: `Bearer ${account.apiKey}` },
    });
    return answer.body.rooms[0].users.map((user: any) => [user.name, user.user_id]);
  };
  const expected = [
    ["Ann", "ann"],
    ["Ben", "ben"],
  ];
  // Folded event by event, and again with both halves of each stay in one page.
  await foldQueued();
  expect(await users()).toEqual(expected);
  await refoldLog({ accountId: account.accountId });
  expect(await users()).toEqual(expected);
}, 30_000);
