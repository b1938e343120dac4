/**
 * Writes to a table cut as a failover cuts them: the table is locked (table-lock.ts), and
 * every backend that waits on it is terminated, so each write attempt fails with the error a
 * server going away gives its clients, for as long as the test likes.
 */
import postgres from "postgres";
import { lockTable } from "./table-lock";

export interface WriteCuts {
  /** How many waiting writes have been cut so far. */
  readonly count: number;
  /** Stops cutting and lets writes through again. */
  end(): Promise<void>;
}

export async function cutWritesTo(table: string, everyMs = 20): Promise<WriteCuts> {
  const lock = await lockTable(table);
  const admin = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
  let count = 0;
  let cutting = true;
  const loop = (async () => {
    while (cutting) {
      const cut = await admin<{ pid: number }[]>`
        select pid from pg_stat_activity
        where datname = current_database() and wait_event_type = 'Lock' and pid <> pg_backend_pid()
          and query ilike ${`%${table}%`}`;
      for (const { pid } of cut) await admin`select pg_terminate_backend(${pid})`;
      count += cut.length;
      await Bun.sleep(everyMs);
    }
  })();
  return {
    get count() {
      return count;
    },
    async end() {
      cutting = false;
      await loop;
      await lock.end();
      await admin.end({ timeout: 5 });
    },
  };
}
