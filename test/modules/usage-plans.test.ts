/**
 * The days a fold rebuilds read their rooms' stays and media by index probes, and the streams it
 * rebuilds are deleted by probes of their subjects, whatever the tables' statistics say. Joined
 * plainly, each statement was planned as a hash join over a scan of every stay or media session
 * there is, so each fold's cost grew with all the usage ever folded. The plans are read from
 * PostgreSQL itself (auto_explain, its output sent back as notices), on tables analysed with
 * thousands of other rooms in them.
 */
import { expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { db } from "../../src/db/client";
import { appendEvent } from "../../src/modules/conference-log/service";
import { rebuildDays, touchedDays } from "../../src/modules/usage/fold-days";
import { rebuildMedia } from "../../src/modules/usage/fold-media";
import { upsertConferenceFacts } from "../../src/modules/usage/fold-stays";
import { rowsOf } from "../../src/db/rows";
import { newAccount } from "../helpers";
import { explained } from "../support/explained";

/** Tables of 200 rooms, each with 30 stays and 20 hourly streams, analysed as autovacuum would. */
async function analysedUsage(accountId: string) {
  // 200 rooms of 30 stays and 20 hourly streams each, then the statistics autovacuum would take
  // (with fewer rows a table of a few pages is cheaper scanned than probed, as the planner rightly finds).
  await db.execute(sql`
    insert into participant_sessions (account_id, room, occupant_jid, user_id, joined_at, left_at)
    select ${accountId}, 'room-' || r, 'p' || p || '@meet.example.com/r' || r, 'user-' || p,
      timestamptz '2026-11-02 09:00:00+00' + p * interval '1 minute',
      timestamptz '2026-11-02 10:00:00+00' + p * interval '1 minute'
    from generate_series(1, 200) as r, generate_series(1, 30) as p`);
  await db.execute(sql`
    insert into media_sessions (account_id, room, kind, subject, started_at, ended_at)
    select ${accountId}, 'room-' || r, 'streaming', 'room-' || r || '-live-' || s,
      timestamptz '2026-11-02 09:10:00+00' + s * interval '1 hour', timestamptz '2026-11-02 09:40:00+00' + s * interval '1 hour'
    from generate_series(1, 200) as r, generate_series(0, 19) as s`);
  await db.execute(sql`analyze participant_sessions, media_sessions`);
}

/** How a plan reads the session tables, as "Seq participant_sessions", "Index media_sessions" and so on. */
const sessionScans = (plan: string) =>
  [...plan.matchAll(/(\w+(?: Only)?) Scan (?:using \S+ )?on (participant_sessions|media_sessions)/g)].map(
    ([, how, table]) => `${how} ${table}`,
  );

test("rebuilding a room's day probes its stays and media instead of scanning the tables", async () => {
  const { accountId } = await newAccount();
  await analysedUsage(accountId);
  const day = new Date("2026-11-02T12:00:00Z");
  const { result: changed, notices } = await explained((tx) =>
    rebuildDays(tx, touchedDays([{ accountId, room: "room-7", from: day, to: day }])),
  );
  // The day was rebuilt from the room's 30 stays (an hour each) and the 15 half-hour streams that began on it.
  expect(changed).toHaveLength(1);
  expect(changed[0]).toMatchObject({ room: "room-7", participant_seconds: 30 * 3600, streaming_seconds: 15 * 1800 });
  const scans = sessionScans(notices.find((notice) => notice.includes("Insert on room_usage_daily")) ?? "");
  expect(new Set(scans.map((scan) => scan.split(" ").at(-1)))).toEqual(
    new Set(["participant_sessions", "media_sessions"]),
  );
  expect(scans.filter((scan) => scan.startsWith("Seq "))).toEqual([]);
});

test("rebuilding a stream deletes its rows by probes of its subject instead of scanning media_sessions", async () => {
  const { accountId } = await newAccount();
  await analysedUsage(accountId);
  const subject = "room-7-live-3";
  for (const [kind, at] of [
    ["stream_started", "2026-11-02T12:10:00Z"],
    ["stream_stopped", "2026-11-02T12:55:00Z"],
  ] as const)
    await appendEvent({
      accountId,
      kind,
      room: "room-7",
      occurredAt: new Date(at),
      subject,
      payload: {},
      dedupeKey: `${kind}|${subject}`,
    });
  const { result: touched, notices } = await explained((tx) => rebuildMedia(tx, [{ accountId, subject }]));
  // The old row (12:10 to 12:40) was deleted and the stream written again from its events, to 12:55.
  expect(touched.map((span) => span.to.toISOString()).sort()).toEqual([
    "2026-11-02T12:40:00.000Z",
    "2026-11-02T12:55:00.000Z",
  ]);
  const scans = sessionScans(notices.find((notice) => notice.includes("Delete on media_sessions")) ?? "");
  expect(scans.length).toBeGreaterThan(0);
  expect(scans.filter((scan) => scan.startsWith("Seq "))).toEqual([]);
});

test("the fold's page statement and days' rebuild are planned for each run, not kept from smaller tables", async () => {
  // A plan kept per connection was made once, when the usage tables were small (just emptied, say), and
  // stayed while they grew: a second fold of a million events in one process took 170 s instead of 9.
  const { accountId } = await newAccount();
  const day = new Date("2026-11-02T12:00:00Z");
  const plans = await db.transaction(async (tx) => {
    // Past the five runs after which PostgreSQL may settle on one plan for any values.
    for (let run = 0; run < 7; run++) {
      await upsertConferenceFacts(tx, { rooms: [{ accountId, room: `room-${run}`, first: 0, events: 0 }] });
      await rebuildDays(tx, touchedDays([{ accountId, room: `room-${run}`, from: day, to: day }]));
    }
    return rowsOf<{ statement: string; generic_plans: string; custom_plans: string }>(
      await tx.execute(
        sql`select statement, generic_plans, custom_plans from pg_prepared_statements
          where statement like ${"%with page as%"} or statement like ${"%Each target numbered%"}`,
      ),
    );
  });
  expect(
    plans.map((plan) => ({
      page: plan.statement.includes("with page as"),
      generic: Number(plan.generic_plans),
      custom: Number(plan.custom_plans),
    })),
  ).toEqual(
    expect.arrayContaining([
      { page: true, generic: 0, custom: 7 },
      { page: false, generic: 0, custom: 7 },
    ]),
  );
  expect(plans).toHaveLength(2);
});
