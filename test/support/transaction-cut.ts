/**
 * Run as a child process by test/faults/postgres-driver.test.ts: opens a transaction through
 * Parley's database handle, prints its backend pid, and waits for the test to terminate that
 * backend mid-query. Prints the outcome and exits 0 if the process survived it.
 */
import { sql } from "drizzle-orm";
import { db } from "../../src/db/client";
import { buildProcess } from "../../src/process/root";

// A worker's process: the database and what it stands on, no broker.
const services = await buildProcess("cdr");

const outcome = await db
  .transaction(async (tx) => {
    const [row] = (await tx.execute(sql`select pg_backend_pid() as pid`)) as unknown as Array<{ pid: number }>;
    console.log(`pid ${row!.pid}`);
    await tx.execute(sql`select pg_sleep(10)`);
  })
  .then(
    () => "committed",
    (error: Error & { cause?: { code?: string } }) => `rejected ${error.cause?.code ?? error.message}`,
  );
console.log(outcome);
// The driver's deferred writes run on the next turns of the event loop: stay long enough to meet them.
await Bun.sleep(500);
console.log("survived");
await services.stop();
