/**
 * A table locked from a connection of its own, so a test can hold Parley's writes to it in flight as long as it likes.
 */
import postgres from "postgres";

export interface TableLock {
  /** Lets the held writes go on; safe to call more than once. */
  release(): void;
  /** Releases the lock and closes its connection. */
  end(): Promise<void>;
}

/** Resolves once `table` is locked in exclusive mode (or the lock could not be taken). */
export async function lockTable(table: string): Promise<TableLock> {
  const holder = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
  let release!: () => void;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  await new Promise<void>((resolve) => {
    holder
      .begin(async (sql) => {
        await sql`lock table ${sql(table)} in exclusive mode`;
        resolve();
        await released;
      })
      .catch(() => resolve());
  });
  return {
    release,
    async end() {
      release();
      await holder.end({ timeout: 5 });
    },
  };
}
