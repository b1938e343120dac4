import { afterAll, beforeAll, expect, test } from "bun:test";
import { spawn } from "bun";
import { and, asc, eq, notExists, sql } from "drizzle-orm";
import postgres from "postgres";
import { db } from "../../src/db/client";
import { conferenceEvents, conferenceEventsUnfolded } from "../../src/modules/conference-log/schema";
import { FOLD_CONSUMER, ringKey } from "../../src/modules/conference-log/rings";
import { type ConferenceEvent, storeEvents } from "../../src/modules/conference-log/service";
import { participantSessions } from "../../src/modules/usage/schema";
import { startCdrWorker } from "../../workers/cdr";
import { outboxContract } from "../core/outbox-contract";
import { newAccount } from "../helpers";
import { at, deliver, occupantLeft } from "../support/event-sync";
import { until } from "../support/wait";

/** Folds waiting on a room's lock, as pg_stat_activity shows them. */
async function foldsWaiting(blocker: postgres.Sql): Promise<number> {
  const [row] =
    await blocker`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%pg_advisory_xact_lock%'`;
  return row!.n;
}

test("a fold whose worker is killed mid-run rolls back; another worker sweeps it up: nothing lost", async () => {
  const account = await newAccount();
  // Hold the room's fold lock from outside, so the first worker is caught inside its transaction.
  const blocker = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
  await blocker`select pg_advisory_lock(hashtextextended(${`${account.accountId}|crash-room`}, 0))`;
  const child = spawn([process.execPath, "test/support/cdr-worker-process.ts"], {
    stdout: "pipe",
    stderr: "inherit",
    env: process.env,
  });
  let taker: ReturnType<typeof startCdrWorker> | undefined;
  try {
    const { value } = await child.stdout.getReader().read();
    expect(new TextDecoder().decode(value)).toContain("ready");
    await deliver(
      account.apiKey,
      occupantLeft(
        "crash-room",
        { id: "kim", occupant_jid: "k@meet.example.com/K" },
        at("10:00:00"),
        at("10:30:00"),
        0,
      ),
    );
    expect(
      await until(
        () => foldsWaiting(blocker),
        (n) => n > 0,
      ),
    ).toBeGreaterThan(0);
    child.kill("SIGKILL");
    await child.exited;
    await blocker`select pg_advisory_unlock_all()`;
    expect(
      await db.select().from(participantSessions).where(eq(participantSessions.accountId, account.accountId)),
    ).toEqual([]);

    // The ring died with the worker: only the sweep of the next one finds the event.
    taker = startCdrWorker({ concurrency: 1, sweepIntervalMs: 200, sweepMinAgeMs: 0 });
    const stays = await until(
      () => db.select().from(participantSessions).where(eq(participantSessions.accountId, account.accountId)),
      (rows) => rows.length > 0,
    );
    expect(stays.map((stay) => [stay.userId, stay.joinedAt.toISOString(), stay.leftAt?.toISOString()])).toEqual([
      ["kim", "2026-11-20T10:00:00.000Z", "2026-11-20T10:30:00.000Z"],
    ]);
  } finally {
    child.kill("SIGKILL");
    await taker?.stop();
    await blocker.end();
  }
}, 30_000);

let accountId = "";
let serial = 0;
beforeAll(async () => {
  accountId = (await newAccount()).accountId;
  // When armed, the next statement marking events folded fails, so its fold's transaction
  // rolls back after the claim. A sequence counts them: it is not rolled back with them.
  await db.execute(sql`
    create sequence cdr_test_marks;
    select nextval('cdr_test_marks');
    create table cdr_test_crash (fire_at bigint not null default 0);
    insert into cdr_test_crash default values;
    create function cdr_test_crash() returns trigger language plpgsql as $$
    begin
      if nextval('cdr_test_marks') = (select fire_at from cdr_test_crash) then raise exception 'the fold died midway'; end if;
      return null;
    end $$;
    create trigger cdr_test_crash after delete on conference_events_unfolded for each statement execute function cdr_test_crash();`);
});
afterAll(async () => {
  await db.execute(sql`
    drop trigger cdr_test_crash on conference_events_unfolded;
    drop function cdr_test_crash;
    drop table cdr_test_crash;
    drop sequence cdr_test_marks`);
});

outboxContract("cdr", () => {
  const account = accountId;
  const roomOf = (key: string) => `contract-${key}`;
  const perRoom = async (folded: boolean) => {
    const rows = await db
      .select({ id: conferenceEvents.id, room: conferenceEvents.room })
      .from(conferenceEvents)
      .where(
        and(
          eq(conferenceEvents.accountId, account),
          folded
            ? notExists(
                db
                  .select()
                  .from(conferenceEventsUnfolded)
                  .where(eq(conferenceEventsUnfolded.eventId, conferenceEvents.id)),
              )
            : undefined,
        ),
      )
      .orderBy(asc(conferenceEvents.id));
    const map = new Map<string, string[]>();
    for (const row of rows) {
      const key = row.room.slice("contract-".length);
      map.set(key, [...(map.get(key) ?? []), String(row.id)]);
    }
    return map;
  };
  return {
    // A room's fold is order-free (every step an upsert or a rebuild); its events are not handled in a sequence.
    ordersPerKey: false,
    async record(outbox, key, count, rollBack = false) {
      const events: ConferenceEvent[] = Array.from({ length: count }, () => {
        const n = ++serial;
        return {
          accountId: account,
          kind: "call_ended",
          room: roomOf(key),
          occurredAt: new Date(at("09:00:00") * 1000 + n * 1000),
          subject: `call-${n}`,
          payload: { reason: "caller_bye" },
          dedupeKey: `contract|${n}`,
        };
      });
      await db
        .transaction(async (tx) => {
          await storeEvents(tx, events);
          outbox.ring(tx, FOLD_CONSUMER, [ringKey({ accountId: account, room: roomOf(key) })]);
          if (rollBack) throw new Error("rolled back");
        })
        .catch((error: Error) => {
          if (!rollBack) throw error;
        });
    },
    start: (outbox, sweepEveryMs) => startCdrWorker({ outbox, sweepIntervalMs: sweepEveryMs, sweepMinAgeMs: 0 }),
    recorded: () => perRoom(false),
    handled: () => perRoom(true),
    async crashNextDrain() {
      await db.execute(sql`update cdr_test_crash set fire_at = (select last_value + 1 from cdr_test_marks)`);
    },
  };
});
