import { expect, test } from "bun:test";
import { and, count, eq, isNull } from "drizzle-orm";
import { db } from "../../src/db/client";
import { conferenceEvents } from "../../src/modules/events/schema";
import { appendEvent } from "../../src/modules/events/service";
import { foldEventIds, sweepUnfolded } from "../../src/modules/usage/fold";
import { call, newAccount } from "../helpers";
import { at } from "../support/event-sync";

const unfolded = async (accountId?: string) =>
  (
    await db
      .select({ n: count() })
      .from(conferenceEvents)
      .where(and(isNull(conferenceEvents.foldedAt), accountId === undefined ? undefined : eq(conferenceEvents.accountId, accountId)))
  )[0]!.n;

/** A stay of `minutes` in `room`, as event_sync reports its leave. */
function stay(accountId: string, room: string, who: string, minutes: number) {
  const joined = at("10:00:00");
  return appendEvent({
    accountId,
    kind: "occupant_left",
    room,
    occurredAt: new Date((joined + minutes * 60) * 1000),
    subject: who,
    payload: { event_name: "muc-occupant-left", room_name: room, occupant: { occupant_jid: who, id: who, joined_at: joined, left_at: joined + minutes * 60 } },
    dedupeKey: `left|${room}|${who}`,
  });
}

test("the sweep leaves young events to their job, folds the older ones into the report, and a later job finds nothing to do", async () => {
  const account = await newAccount();
  await stay(account.accountId, "swept", "ann@x/1", 20);
  await stay(account.accountId, "swept", "bo@x/1", 15);
  await sweepUnfolded(60_000);
  expect(await unfolded(account.accountId)).toBe(2);

  await sweepUnfolded(0);
  expect(await unfolded(account.accountId)).toBe(0);
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
  for (let i = 0; i < 120; i++) await stay(account.accountId, `room-${i % 7}`, `p${i}@x/1`, 1 + (i % 30));
  const before = await unfolded();
  const counts = await Promise.all([sweepUnfolded(0, 25), sweepUnfolded(0, 25), sweepUnfolded(0, 25)]);
  expect(counts.reduce((sum, n) => sum + n, 0)).toBe(before);
  expect(await unfolded()).toBe(0);
  const answer = await call("POST", "/api/v1/pricing/cdr", {
    body: { start_date: "2026-11-20T00:00:00Z", end_date: "2026-11-21T00:00:00Z" },
    headers: { authorization: `Bearer ${account.apiKey}` },
  });
  const expected = new Map<string, number>();
  for (let i = 0; i < 120; i++) expected.set(`room-${i % 7}`, (expected.get(`room-${i % 7}`) ?? 0) + 1 + (i % 30));
  expect(Object.fromEntries(answer.body.days.map((day: any) => [day.room_name, day.participant_minutes]))).toEqual(Object.fromEntries(expected));
});
