import { expect, test } from "bun:test";
import { eq } from "drizzle-orm";
import { db } from "../../src/db/client";
import { conferenceEvents } from "../../src/modules/events/schema";
import { foldEventIds, sweepUnfolded } from "../../src/modules/usage/fold";
import { call, newAccount } from "../helpers";
import { storeStay, unfoldedCount } from "../support/stored-events";

test("the sweep leaves young events to their job, folds the older ones into the report, and a later job finds nothing to do", async () => {
  const account = await newAccount();
  await storeStay(account.accountId, "swept", "ann@x/1", 20);
  await storeStay(account.accountId, "swept", "bo@x/1", 15);
  await sweepUnfolded(60_000);
  expect(await unfoldedCount(account.accountId)).toBe(2);

  await sweepUnfolded(0);
  expect(await unfoldedCount(account.accountId)).toBe(0);
  const answer = await call("POST", "/api/v1/pricing/cdr", {
    body: { start_date: "2026-11-20T00:00:00Z", end_date: "2026-11-21T00:00:00Z" },
    headers: { authorization: `Bearer ${account.apiKey}` },
  });
  expect(answer.body.days.map((day: any) => [day.room_name, day.participant_minutes, day.distinct_participants])).toEqual([["swept", 35, 2]]);

  const ids = (await db.select({ id: conferenceEvents.id }).from(conferenceEvents).where(eq(conferenceEvents.accountId, account.accountId))).map((row) => row.id);
  expect(await foldEventIds(ids)).toBe(0);
});

test("sweeps running at once share the backlog: each event is claimed by exactly one", async () => {
  const account = await newAccount();
  for (let i = 0; i < 120; i++) await storeStay(account.accountId, `room-${i % 7}`, `p${i}@x/1`, 1 + (i % 30));
  const before = await unfoldedCount();
  const counts = await Promise.all([sweepUnfolded(0, 25), sweepUnfolded(0, 25), sweepUnfolded(0, 25)]);
  expect(counts.reduce((sum, n) => sum + n, 0)).toBe(before);
  expect(await unfoldedCount()).toBe(0);
  const answer = await call("POST", "/api/v1/pricing/cdr", {
    body: { start_date: "2026-11-20T00:00:00Z", end_date: "2026-11-21T00:00:00Z" },
    headers: { authorization: `Bearer ${account.apiKey}` },
  });
  const expected = new Map<string, number>();
  for (let i = 0; i < 120; i++) expected.set(`room-${i % 7}`, (expected.get(`room-${i % 7}`) ?? 0) + 1 + (i % 30));
  expect(Object.fromEntries(answer.body.days.map((day: any) => [day.room_name, day.participant_minutes]))).toEqual(Object.fromEntries(expected));
});
