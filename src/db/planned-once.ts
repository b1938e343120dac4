/**
 * Statements planned once per connection. Every statement is prepared (src/db/client.ts), and
 * each run is planned for its own values; a statement on a hot path whose plan does not depend
 * on its values (the outbox inside every writing transaction) may keep one plan for all of
 * them instead, which is a good part of its cost. Pass the transaction handle inside a
 * transaction: only there can the plan mode change for one statement.
 */
import type { SQL } from "drizzle-orm";
import { PgDialect, PgTransaction } from "drizzle-orm/pg-core";
import type { Sql } from "postgres";
import type { Database } from "./client";

const dialect = new PgDialect();

/** The postgres.js handle a transaction runs on; none on the embedded database. */
function driverOf(handle: Database): Sql | undefined {
  const client = (handle._.session as unknown as { client?: Partial<Sql> }).client;
  return typeof client?.unsafe === "function" ? (client as Sql) : undefined;
}

/**
 * Runs `query`; inside a transaction on PostgreSQL, under PostgreSQL's own choice of plan (after
 * five runs, one plan for any values when it costs no more), as it was before every statement
 * was prepared. The mode is set for this statement alone and set back after it; the three are
 * sent together, in order (postgres.js sends a query a microtask after `execute`, in call order).
 */
export async function executePlannedOnce(handle: Database, query: SQL): Promise<unknown> {
  const driver = handle instanceof PgTransaction ? driverOf(handle as unknown as Database) : undefined;
  if (!driver) return handle.execute(query);
  const { sql: text, params } = dialect.sqlToQuery(query);
  const [, rows] = await Promise.all([
    driver.unsafe("set local plan_cache_mode = auto").execute(),
    driver.unsafe(text, params as never[]).execute(),
    driver.unsafe("set local plan_cache_mode to default").execute(),
  ]);
  return rows;
}
