/**
 * The days a fold rebuilds read their rooms' stays and media by index probes, whatever the
 * tables' statistics say. Joined plainly, the statement was planned as a hash join over a scan of
 * every stay there is once autovacuum's analyze had counted the table, so each fold's cost grew
 * with all the usage ever folded. The plans are read from PostgreSQL itself (auto_explain, its
 * output sent back as notices), on tables analysed with thousands of other rooms in them.
 */
import { expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { drizzle } from "drizzle-orm/postgres-js";
import postgres from "postgres";
import type { Database } from "../../src/db/client";
import { db } from "../../src/db/client";
import { rebuildDays, touchedDays } from "../../src/modules/usage/fold-days";
import { newAccount } from "../helpers";

test("rebuilding a room's day probes its stays and media instead of scanning the tables", async () => {
  const { accountId } = await newAccount();
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

  const notices: string[] = [];
  const client = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: (notice) => notices.push(notice.message) });
  const handle = drizzle(client) as unknown as Database;
  try {
    const day = new Date("2026-11-02T12:00:00Z");
    const changed = await handle.transaction(async (tx) => {
      await tx.execute(sql`load 'auto_explain'`);
      await tx.execute(sql`set local auto_explain.log_min_duration = 0`);
      await tx.execute(sql`set local auto_explain.log_level = notice`);
      return rebuildDays(tx, touchedDays([{ accountId, room: "room-7", from: day, to: day }]));
    });
    // The day was rebuilt from the room's 30 stays (an hour each) and the 15 half-hour streams that began on it.
    expect(changed).toHaveLength(1);
    expect(changed[0]).toMatchObject({ room: "room-7", participant_seconds: 30 * 3600, streaming_seconds: 15 * 1800 });
    const plan = notices.find((notice) => notice.includes("Insert on room_usage_daily")) ?? "";
    const scans = [
      ...plan.matchAll(/(\w+(?: Only)?) Scan (?:using \S+ )?on (participant_sessions|media_sessions)/g),
    ].map(([, how, table]) => `${how} ${table}`);
    expect(new Set(scans.map((scan) => scan.split(" ").at(-1)))).toEqual(
      new Set(["participant_sessions", "media_sessions"]),
    );
    expect(scans.filter((scan) => scan.startsWith("Seq "))).toEqual([]);
  } finally {
    await client.end();
  }
});
