import { beforeAll, beforeEach, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { createOutbox } from "../../src/core/outbox";
import { LocalPubSub } from "../../src/core/pubsub";
import { db, type Database } from "../../src/db/client";
import { rowsOf } from "../../src/db/rows";
import { redisPubSub } from "../../src/queue/redis-pubsub";
import { until } from "../support/wait";
import { outboxContract, processOutbox } from "./outbox-contract";

/**
 * The smallest consumer that keeps the contract: facts in a work table of its own, claimed
 * with SKIP LOCKED under a lock per key, marked done with a record of their handling in the
 * claim's transaction.
 */
beforeAll(async () => {
  await db.execute(sql`
    create table outbox_test_facts (id bigserial primary key, key text not null, done boolean not null default false);
    create table outbox_test_handled (seq bigserial primary key, fact_id bigint not null, key text not null)`);
});
beforeEach(async () => {
  await db.execute(sql`truncate outbox_test_facts, outbox_test_handled`);
});

async function drainKeys(tx: Database, keys: string[], crash: boolean): Promise<number> {
  // Keys in a fixed order, so two drains never wait on each other crosswise.
  await tx.execute(
    sql`select pg_advisory_xact_lock(hashtextextended(k, 7)) from unnest(${`{${[...keys].sort().join(",")}}`}::text[]) as k order by k`,
  );
  const claimed = rowsOf<{ id: string; key: string }>(
    await tx.execute(
      sql`select id, key from outbox_test_facts where not done and key = any(${`{${keys.join(",")}}`}::text[]) order by id for update skip locked`,
    ),
  );
  if (claimed.length === 0) return 0;
  await tx.execute(
    sql`insert into outbox_test_handled (fact_id, key) select (f->>'id')::bigint, f->>'key' from jsonb_array_elements(${JSON.stringify(claimed)}::jsonb) f`,
  );
  if (crash) throw new Error("died mid-drain");
  await tx.execute(
    sql`update outbox_test_facts set done = true where id = any(${`{${claimed.map((row) => row.id).join(",")}}`}::bigint[])`,
  );
  return claimed.length;
}

let crashNext = false;

outboxContract("in-test consumer", () => ({
  ordersPerKey: true,
  async record(outbox, key, count, rollBack = false) {
    await db
      .transaction(async (tx) => {
        await tx.execute(sql`insert into outbox_test_facts (key) select ${key} from generate_series(1, ${count})`);
        outbox.ring(tx, "outbox-test", [key]);
        if (rollBack) throw new Error("rolled back");
      })
      .catch((error: Error) => {
        if (!rollBack) throw error;
      });
  },
  start(outbox, sweepEveryMs) {
    return outbox.register({
      name: "outbox-test",
      sweepEveryMs,
      async drain(due) {
        const keys =
          due === "sweep"
            ? rowsOf<{ key: string }>(
                await db.execute(sql`select distinct key from outbox_test_facts where not done`),
              ).map((row) => row.key)
            : [...due];
        if (keys.length === 0) return 0;
        const crash = crashNext;
        crashNext = false;
        return db.transaction((tx) => drainKeys(tx, keys, crash));
      },
    });
  },
  async recorded() {
    return byKey(
      rowsOf<{ id: string; key: string }>(
        await db.execute(sql`select id::text, key from outbox_test_facts order by id`),
      ),
    );
  },
  async handled() {
    return byKey(
      rowsOf<{ id: string; key: string }>(
        await db.execute(sql`select fact_id::text as id, key from outbox_test_handled order by seq`),
      ),
    );
  },
  crashNextDrain() {
    crashNext = true;
  },
}));

function byKey(rows: Array<{ id: string; key: string }>): Map<string, string[]> {
  const map = new Map<string, string[]>();
  for (const row of rows) map.set(row.key, [...(map.get(row.key) ?? []), row.id]);
  return map;
}

test("a ring crosses processes over Redis with its keys, once the ringing transaction commits", async () => {
  const [here, there] = [processOutbox(redisPubSub), processOutbox(redisPubSub)];
  const heard: string[][] = [];
  const consumer = there.register({
    name: "outbox-redis-test",
    sweepEveryMs: 600_000,
    async drain(due) {
      if (due !== "sweep") heard.push([...due].sort());
      return 0;
    },
  });
  await consumer.ready;
  await db.transaction(async (tx) => {
    here.ring(tx, "outbox-redis-test", ["b", "a"]);
    here.ring(tx, "outbox-redis-test", ["a"]);
    await tx.execute(sql`select 1`);
  });
  await db
    .transaction(async (tx) => {
      here.ring(tx, "outbox-redis-test", ["rolled-back"]);
      throw new Error("rolled back");
    })
    .catch(() => {});
  here.ring(db, "outbox-redis-test", ["c"]);
  expect(
    await until(
      () => heard.flat(),
      (keys) => keys.includes("c"),
    ),
  ).toEqual(["a", "b", "c"]);
  await consumer.stop();
});

test("a drain of rung keys that never ends does not hold back the consumer's sweep", async () => {
  const bus = new LocalPubSub();
  const outbox = createOutbox({
    afterCommit: (step) => queueMicrotask(() => void step()),
    pubsub: () => bus,
    publishWithinMs: 100,
  });
  let sweeps = 0;
  let rungDrains = 0;
  let release = () => {};
  const consumer = outbox.register({
    name: "outbox-test-hung",
    sweepEveryMs: 20,
    async drain(due) {
      if (due === "sweep") {
        sweeps++;
        return 0;
      }
      rungDrains++;
      // As a query on a connection that died under it might have: it never settles until let go.
      await new Promise<void>((resolve) => {
        release = resolve;
      });
      return 0;
    },
  });
  outbox.ring({}, "outbox-test-hung", ["a"]);
  await until(
    () => rungDrains,
    (n) => n === 1,
    5_000,
    10,
  );
  const sweepsBefore = sweeps;
  expect(
    await until(
      () => sweeps,
      (n) => n >= sweepsBefore + 3,
      5_000,
      10,
    ),
  ).toBeGreaterThanOrEqual(sweepsBefore + 3);
  // Rings meanwhile wait for the drain in flight, and are drained once it ends.
  outbox.ring({}, "outbox-test-hung", ["b"]);
  expect(rungDrains).toBe(1);
  release();
  expect(
    await until(
      () => rungDrains,
      (n) => n === 2,
      5_000,
      10,
    ),
  ).toBe(2);
  release();
  await consumer.stop();
});
