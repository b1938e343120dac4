/**
 * postgres.js 3.4.9 keeps a dead session's state past a reconnect (src/db/postgres-write-guard.ts):
 * the next session replayed the old backend's error onto its first query and skipped its
 * read-write check, and a transaction's later queries ran on whatever session the connection
 * had next, or waited for ever; a query sent as the socket failed waited for ever, and a write left
 * buffered held back the next session's startup until its connect timeout. Each case here
 * terminates a backend, as a failover does.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import postgres from "postgres";

const url = process.env.DATABASE_URL!;
const table = `reconnect_${crypto.randomUUID().replaceAll("-", "")}`;
let admin: postgres.Sql;

beforeAll(async () => {
  admin = postgres(url, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create table ${table} (n int)`);
});

afterAll(async () => {
  await admin.unsafe(`drop table if exists ${table}`);
  await admin.end();
});

/** Terminates the backend `pid` once it runs `pg_sleep`, the query each case has it wait in. */
async function terminateWhenSleeping(pid: number): Promise<void> {
  for (let tries = 0; tries < 100; tries++) {
    const [row] = await admin<{ terminated: boolean }[]>`
      select pg_terminate_backend(pid) as terminated from pg_stat_activity
      where pid = ${pid} and query like '%pg_sleep%'`;
    if (row?.terminated) return;
    await Bun.sleep(50);
  }
  throw new Error(`backend ${pid} never ran its pg_sleep`);
}

/** The outcome of a query within a bound: its code or "ok", or "hung" past it. */
function outcome(query: Promise<unknown>, withinMs = 10_000): Promise<string> {
  return Promise.race([
    query.then(
      () => "ok",
      (error: { code?: string }) => String(error.code),
    ),
    Bun.sleep(withinMs).then(() => "hung"),
  ]);
}

test("after a backend is terminated mid-query, the next query runs on a fresh session", async () => {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    const [{ pid }] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
    const cut = outcome(sql`select pg_sleep(10)`);
    await terminateWhenSleeping(pid);
    expect(["57P01", "CONNECTION_CLOSED"]).toContain(await cut);
    // Before the fix this failed with the old backend's 57P01, and the new session skipped its checks.
    const [next] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
    expect(next!.pid).not.toBe(pid);
  } finally {
    await sql.end({ timeout: 1 });
  }
});

test("a transaction's queries after its backend is terminated are refused, never run on another session", async () => {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    const [{ pid }] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
    let afterCut: Promise<string> | undefined;
    const transaction = sql.begin(async (tx) => {
      await tx.unsafe(`insert into ${table} values (1)`);
      const cut = await outcome(tx`select pg_sleep(10)`);
      // Work the callback does after the cut (an ORM's own rollback, a caught error): while the
      // pool reconnects for another caller, it must not reach that caller's session.
      const other = sql`select 1`;
      afterCut = outcome(tx.unsafe(`insert into ${table} values (2)`));
      await other;
      return cut;
    });
    const killing = terminateWhenSleeping(pid);
    expect(await outcome(transaction)).not.toBe("ok");
    await killing;
    expect(await afterCut).toBe("CONNECTION_CLOSED");
    expect([...(await sql.unsafe(`select n from ${table}`))]).toEqual([]);
    // The pool is whole again.
    expect(await outcome(sql`select 1`)).toBe("ok");
  } finally {
    await sql.end({ timeout: 1 });
  }
});

test("a query sent as its connection's socket fails is refused, and the next session starts at once", async () => {
  const sql = postgres(url, { max: 1, onnotice: () => {}, connect_timeout: 3 });
  try {
    // The first query after a termination finds the socket failing; the second is often sent between
    // the socket's error and its close (about one time in three here), which is the moment at stake.
    for (let round = 0; round < 20; round++) {
      const [{ pid }] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
      await admin`select pg_terminate_backend(${pid})`;
      await outcome(sql`select 1`);
      expect(await outcome(sql`select 1`)).not.toBe("hung");
      // A startup message queued behind the dead session's write waited out the connect timeout, then failed.
      expect(await outcome(sql`select 1`)).toBe("ok");
    }
  } finally {
    await sql.end({ timeout: 1 });
  }
}, 60_000);
