/**
 * The database handle. postgres.js when DATABASE_URL is set; otherwise an embedded
 * PGlite database in DATA_DIR (one process only: PGlite holds its folder exclusively).
 */
import { mkdirSync } from "node:fs";
import { sql } from "drizzle-orm";
import type { PgDatabase, PgQueryResultHKT } from "drizzle-orm/pg-core";
import { config } from "../config";
import * as schema from "./schema";

export type Database = PgDatabase<PgQueryResultHKT, typeof schema>;

export interface DatabaseHandle {
  db: Database;
  kind: "postgres" | "pglite";
  close(): Promise<void>;
}

async function openPostgres(url: string): Promise<DatabaseHandle> {
  const { default: postgres } = await import("postgres");
  const { drizzle } = await import("drizzle-orm/postgres-js");
  const client = postgres(url, { max: config.database.poolSize, onnotice: () => {} });
  return {
    db: drizzle(client, { schema }) as unknown as Database,
    kind: "postgres",
    close: () => client.end({ timeout: 5 }),
  };
}

async function openPglite(dataDir: string): Promise<DatabaseHandle> {
  const { PGlite } = await import("@electric-sql/pglite");
  const { pg_trgm } = await import("@electric-sql/pglite/contrib/pg_trgm");
  const { drizzle } = await import("drizzle-orm/pglite");
  mkdirSync(dataDir, { recursive: true });
  const client = await PGlite.create(dataDir, { extensions: { pg_trgm } });
  return {
    db: drizzle(client, { schema }) as unknown as Database,
    kind: "pglite",
    close: () => client.close(),
  };
}

export const database: DatabaseHandle = config.database.url
  ? await openPostgres(config.database.url)
  : await openPglite(config.database.dataDir);

export const db = database.db;

export async function pingDatabase(): Promise<void> {
  await db.execute(sql`select 1`);
}
