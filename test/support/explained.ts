/**
 * Plans as PostgreSQL made them: a test runs its statements through `explained`, and each
 * statement's plan comes back as a notice (auto_explain, loaded for that transaction alone).
 */
import { drizzle } from "drizzle-orm/postgres-js";
import { sql } from "drizzle-orm";
import postgres from "postgres";
import type { Database } from "../../src/db/client";

/** Runs `work` in a transaction whose statements' plans come back as notices; answers its result and the plans. */
export async function explained<T>(work: (tx: Database) => Promise<T>): Promise<{ result: T; notices: string[] }> {
  const notices: string[] = [];
  const client = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: (notice) => notices.push(notice.message) });
  const handle = drizzle(client) as unknown as Database;
  try {
    const result = await handle.transaction(async (tx) => {
      await tx.execute(sql`load 'auto_explain'`);
      await tx.execute(sql`set local auto_explain.log_min_duration = 0`);
      await tx.execute(sql`set local auto_explain.log_level = notice`);
      return work(tx);
    });
    return { result, notices };
  } finally {
    await client.end();
  }
}
