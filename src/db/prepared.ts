/**
 * Raw statements run as named prepared statements. `handle.execute` has the driver parse and
 * plan the text on every call; a statement on a hot path (the outbox inside every writing
 * transaction, a webhooks worker's claims) is planned once per connection instead, which
 * is a good part of its cost. Pass the transaction handle inside a transaction.
 */
import type { SQL } from "drizzle-orm";
import { PgDialect } from "drizzle-orm/pg-core";
import type { Database } from "./client";

const dialect = new PgDialect();

/** Runs `query` prepared under `name` (one name per statement text); answers what `execute` answers. */
export function executePrepared(handle: Database, name: string, query: SQL): Promise<unknown> {
  return handle._.session.prepareQuery(dialect.sqlToQuery(query), undefined, name, false).execute();
}
