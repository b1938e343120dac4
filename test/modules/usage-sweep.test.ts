import { expect, test } from "bun:test";
import { eq } from "drizzle-orm";
import { db } from "../../src/db/client";
import { conferenceEvents } from "../../src/modules/conference-log/schema";
import { claimUnfoldedRooms } from "../../src/modules/usage/fold-queue";
import { foldEventIds, sweepUnfolded } from "../../src/modules/usage/fold";
import { call, newAccount } from "../helpers";
import { storeJoin, storeStay, unfoldedCount } from "../support/stored-events";

test("the sweep leaves young events to their job, folds older ones; a later job finds nothing to do", async () => {
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
  expect(
    answer.body.days.map((day: any) => [day.room_name, day.participant_minutes, day.distinct_participants]),
  ).toEqual([["swept", 35, 2]]);

  const ids = (
    await db
      .select({ id: conferenceEvents.id })
      .from(conferenceEvents)
      .where(eq(conferenceEvents.accountId, account.accountId))
  ).map((row) => row.id);
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
  expect(Object.fromEntries(answer.body.days.map((day: any) => [day.room_name, day.participant_minutes]))).toEqual(
    Object.fromEntries(expected),
  );
});

test("a sweep passes over rooms another fold holds and folds the rest, rather than waiting or giving up", async () => {
  await sweepUnfolded(0);
  const account = await newAccount();
  for (let i = 0; i < 60; i++) await storeStay(account.accountId, `held-${i % 6}`, `p${i}@x/1`, 1 + (i % 9));
  const before = await unfoldedCount();
  const released = Promise.withResolvers<void>();
  let held: number[] = [];
  const heldClaimed = Promise.withResolvers<void>();
  // A fold that claimed a page and has not committed yet: its rows stay locked until it ends.
  const holder = db
    .transaction(async (tx) => {
      held = (await claimUnfoldedRooms(tx, 0, 25)).map((event) => event.id);
      heldClaimed.resolve();
      await released.promise;
      throw new Error("rolled back on purpose: the held page goes back to the list");
    })
    .catch(() => undefined);
  await heldClaimed.promise;
  expect(held.length).toBeGreaterThan(0);
  expect(held.length).toBeLessThan(before);
  // Every event the held page did not take, none waited for: the held page's sampled events are its own.
  expect(await sweepUnfolded(0, 25)).toBe(before - held.length);
  released.resolve();
  await holder;
  expect(await unfoldedCount()).toBe(held.length);
  expect(await sweepUnfolded(0, 25)).toBe(held.length);
  expect(await unfoldedCount()).toBe(0);
});

test("a sweep's page is whole rooms by their oldest event, so a stay's join and leave fold together", async () => {
  await sweepUnfolded(0);
  const account = await newAccount();
  // Interleaved as live traffic stores them: every room's joins, then every room's leaves.
  const rooms = ["page-a", "page-b", "page-c"];
  for (const room of rooms) await storeJoin(account.accountId, room, `ann@${room}/1`);
  for (const room of rooms) await storeJoin(account.accountId, room, `bo@${room}/1`);
  for (const room of rooms) await storeStay(account.accountId, room, `ann@${room}/1`, 10);
  const page = await db.transaction((tx) => claimUnfoldedRooms(tx, 0, 3));
  // The oldest due events name page-a first: all three of its events, none of the other rooms'.
  expect(page.map((event) => [event.room, event.kind])).toEqual([
    ["page-a", "occupant_joined"],
    ["page-a", "occupant_joined"],
    ["page-a", "occupant_left"],
  ]);
  await sweepUnfolded(0, 3);
  expect(await unfoldedCount(account.accountId)).toBe(0);
});

test("a page that cannot be folded is folded event by event: the bad event stays listed, the rest folds", async () => {
  await sweepUnfolded(0);
  const account = await newAccount();
  await storeJoin(account.accountId, "bad-page", "ann@x/1");
  await storeStay(account.accountId, "bad-page", "ann@x/1", 10);
  // A join no timestamp can hold: PostgreSQL refuses it, and with it the whole page. Stored straight
  // into the log past the ingestion's parser (listed as unfolded by its trigger, no ring), and
  // removed after, so no later test or fold meets it.
  const [bad] = await db
    .insert(conferenceEvents)
    .values({
      accountId: account.accountId,
      kind: "occupant_joined",
      room: "bad-page",
      occurredAt: new Date(),
      subject: "bo@x/1",
      payload: { room_name: "bad-page", occupant: { occupant_jid: "bo@x/1", joined_at: 1e300 } },
      occupants: [
        { jid: "bo@x/1", userId: null, name: null, email: null, joinedAt: "300000-01-01T00:00:00Z", leftAt: null },
      ],
      dedupeKey: "joined|bad-page|bo@x/1",
    })
    .returning({ id: conferenceEvents.id });
  try {
    expect(await sweepUnfolded(0)).toBe(2);
    expect(await unfoldedCount(account.accountId)).toBe(1);
    const answer = await call("POST", "/api/v1/pricing/cdr", {
      body: { start_date: "2026-11-20T00:00:00Z", end_date: "2026-11-21T00:00:00Z" },
      headers: { authorization: `Bearer ${account.apiKey}` },
    });
    expect(answer.body.days.map((day: any) => [day.room_name, day.participant_minutes])).toEqual([["bad-page", 10]]);
  } finally {
    await db.delete(conferenceEvents).where(eq(conferenceEvents.id, bad!.id));
  }
});
