/**
 * The database handle. postgres.js when DATABASE_URL is set; otherwise an embedded
 * PGlite database in DATA_DIR (one process only: PGlite holds its folder exclusively).
 * Opened by the process's composition root (src/process/root.ts), which puts it in place
 * for the modules that import `db` and closes it last; importing this module opens nothing.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { existsSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { sql } from "drizzle-orm";
import type { PgDatabase, PgQueryResultHKT } from "drizzle-orm/pg-core";
import type { ParameterOrJSON, Sql, UnsafeQueryOptions } from "postgres";
import { config } from "../core/config";
import { installed } from "../core/installed";
import { makePrivate } from "../core/private-dir";

/** No schema is handed to drizzle: queries name their tables (`db.select().from(table)`), never `db.query.*`. */
export type Database = PgDatabase<PgQueryResultHKT>;

export interface DatabaseHandle {
  db: Database;
  kind: "postgres" | "pglite";
  close(): Promise<void>;
}

/**
 * Marks the async flow inside a transaction callback of the guarded handle, and holds what
 * is to run once that transaction has committed.
 */
const insideTransaction = new AsyncLocalStorage<Array<() => unknown>>();

/**
 * Runs `step` once the transaction the caller is inside has committed (never if it rolls
 * back), or at once outside any transaction. For best-effort follow-ups such as ringing a
 * queue's doorbell: a failure is logged by the step itself, never raised to the caller.
 */
export function afterCommit(step: () => unknown): void {
  const pending = insideTransaction.getStore();
  if (pending) pending.push(step);
  else void Promise.resolve().then(step);
}

/**
 * Runs `step` outside the transaction callback the caller is in, so what it sets going may
 * use the global handle: for work a transaction starts on purpose beside itself, with its
 * own connection, and that never waits for that transaction (a webhooks batch, held open
 * while it sends, sets the next batch and the attempts going).
 */
export function outsideTransaction<T>(step: () => T): T {
  return insideTransaction.exit(step);
}

/**
 * Wraps a handle so it refuses every use from inside one of its own transaction callbacks,
 * whether the callback reaches it directly or through a service function. Such a query
 * would wait for a second connection: on PostgreSQL it merely escapes the transaction, on
 * PGlite (one connection behind one mutex) it waits for ever. Failing at once with a clear
 * message makes the mistake show in any test on either driver, not as a hang.
 */
export function guardTransactions(handle: Database): Database {
  type Callback = Parameters<Database["transaction"]>[0];
  type Options = Parameters<Database["transaction"]>[1];
  const transaction = async (callback: Callback, options?: Options) => {
    const committed: Array<() => unknown> = [];
    const result = await handle.transaction((tx) => insideTransaction.run(committed, () => callback(tx)), options);
    for (const step of committed) void Promise.resolve().then(step);
    return result;
  };
  return new Proxy(handle, {
    get(target, property) {
      refuseInsideTransaction(`db.${String(property)}`);
      if (property === "transaction") return transaction;
      const value = Reflect.get(target, property, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/** Statements with more parameters than this run unnamed (see preparedByDefault). */
const MOST_PREPARED_PARAMETERS = 32;

/**
 * The driver with its statements prepared on their connection. drizzle names a statement only when
 * the query is named, and for an unnamed statement with parameters postgres.js first sends Parse and
 * Describe, waits for the parameters' types, then sends Bind and Execute: two round trips and a
 * server wake-up more per query, 40 % of a key look-up's rate. A prepared statement is
 * described once per connection; later runs are one round trip, and the text is not parsed again.
 * A connection keeps the statements it prepared until it closes (postgres.js closes each within
 * an hour). A statement of many parameters is not prepared: those are the batch writes, whose
 * text changes with the batch's size and whose parsed form is large, so each size kept on each
 * connection would cost the server memory for a round trip the batch already shares.
 */
function preparedByDefault(client: Sql): Sql {
  return new Proxy(client, {
    get(target, property) {
      if (property === "unsafe") {
        return (query: string, parameters?: ParameterOrJSON<never>[], options?: UnsafeQueryOptions) =>
          target.unsafe(query, parameters, {
            ...options,
            prepare: options?.prepare === true || (parameters?.length ?? 0) <= MOST_PREPARED_PARAMETERS,
          });
      }
      // A transaction's (and a savepoint's) own handle is the one its callback gets: prepared as well.
      if (property === "begin" || property === "savepoint") {
        return (...args: unknown[]) => {
          const callback = args.pop() as (inner: Sql) => unknown;
          const open = Reflect.get(target, property, target) as (...all: unknown[]) => unknown;
          return open.call(target, ...args, (inner: Sql) => callback(preparedByDefault(inner)));
        };
      }
      const value = Reflect.get(target, property, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/** Throws when called from inside a transaction callback of the guarded handle, naming the use. */
function refuseInsideTransaction(use: string): void {
  if (insideTransaction.getStore()) {
    throw new Error(
      `the global database handle was used inside a transaction (${use}): ` +
        "use the transaction's own handle, passed down as an argument",
    );
  }
}

/**
 * A query of the global handle built once (drizzle's `.prepare`), for a hot path whose text the
 * query builder would otherwise make on every call (the mapper's look-ups answered 50–75 % more a
 * second once built once). Refused inside a transaction callback, as the handle itself is:
 * built once, it no longer passes through the handle's guard.
 */
export function builtOnce<Result>(
  name: string,
  build: () => { execute: (placeholders?: Record<string, unknown>) => Promise<Result> },
): { execute: (placeholders: Record<string, unknown>) => Promise<Result> } {
  // Built at the first run rather than as its module loads: the database is opened by the process's root.
  let query: ReturnType<typeof build> | undefined;
  return {
    execute: (placeholders) => {
      refuseInsideTransaction(name);
      query ??= build();
      return query.execute(placeholders);
    },
  };
}

/** Whether the URL names several hosts (`postgres://u@db1,db2:5433/parley`). */
function severalHosts(url: string): boolean {
  return /^[^:/?#]+:\/\/(?:[^@/?#]*@)?[^/?#]*,/.test(url);
}

async function openPostgres(url: string, poolSize: number): Promise<DatabaseHandle> {
  // Before the driver loads: it must be loaded with the fix applied.
  await import("./postgres-write-guard");
  const { default: postgres } = await import("postgres");
  const { drizzle } = await import("drizzle-orm/postgres-js");
  const client = postgres(url, {
    max: poolSize,
    idle_timeout: config.database.idleSeconds,
    // Statements are prepared (preparedByDefault); each run is still planned for its own values, as an
    // unnamed statement is. A plan made once for any values is kept to the few statements that ask
    // for it (executePlannedOnce): for others it can be far off, as it was for the fold's page.
    connection: { plan_cache_mode: "force_custom_plan" },
    onnotice: () => {},
    // While PostgreSQL is away a query waits for the next connection attempt; the driver's
    // default spaces attempts up to 20 s apart and gives a silent host 30 s, so requests would
    // hang that long before their 503. Attempts at most a second apart, 5 s each, fail fast.
    backoff: (retries: number) => Math.min(0.05 * 2 ** retries, 1),
    connect_timeout: 5,
    // Several hosts: only one that accepts writes will do (a standby is left for the next host),
    // so after a failover connections find the promoted standby. A URL's own choice is kept.
    ...(severalHosts(url) && !/[?&]target_session_attrs=/.test(url) && { target_session_attrs: "read-write" as const }),
  });
  return {
    db: guardTransactions(drizzle(preparedByDefault(client)) as unknown as Database),
    kind: "postgres",
    close: () => client.end({ timeout: 5 }),
  };
}

/** When the process started (Linux, from /proc), so a pid reused after a crash is told apart; "" elsewhere. */
function startTimeOf(pid: number): string {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Field 22, counted from the state (field 3) that follows the parenthesised command name.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] ?? "";
  } catch {
    return "";
  }
}

function holds(pid: number, startedAt: string): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EPERM") return false;
  }
  const now = startTimeOf(pid);
  // Without /proc the pid is all there is to go on.
  return startedAt === "" || now === "" || now === startedAt;
}

/**
 * PGlite has no lock of its own: a second process on the same folder (the command line in
 * direct mode beside a running server, or a second server) works on its own copy of the
 * pages, so neither sees the other's writes and the folder is corrupted when both write. A
 * pid file keeps it to one.
 */
function lockDataDir(dataDir: string): () => void {
  const file = join(dataDir, "parley.pid");
  const mine = `${process.pid} ${startTimeOf(process.pid)}`;
  for (;;) {
    try {
      writeFileSync(file, mine, { flag: "wx" });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      const [pid = "", startedAt = ""] = readFileSync(file, "utf8").trim().split(" ");
      const holder = Number(pid);
      if (Number.isInteger(holder) && holder > 0 && holder !== process.pid && holds(holder, startedAt)) {
        console.error(
          `parley: the embedded database in ${dataDir} is open in process ${holder} (a running Parley). ` +
            "Only one process can use it: stop that one first, or let it take the command: `npm run parley " +
            "-- <command>` reaches it through DATA_DIR/parley.sock once it serves. On PostgreSQL " +
            `(DATABASE_URL) several processes share one database. If no Parley runs, delete ${file}.`,
        );
        process.exit(1);
      }
      // Left behind by a process that is gone (its pid may since have gone to another process).
      unlinkSync(file);
    }
  }
  const release = () => {
    try {
      if (readFileSync(file, "utf8") === mine) unlinkSync(file);
    } catch {}
  };
  process.on("exit", release);
  return release;
}

/** A new embedded database is made and migrated by a process of its own (create-pglite.ts says why). */
async function createPglite(dataDir: string): Promise<void> {
  if (existsSync(join(dataDir, "PG_VERSION"))) return;
  const maker = Bun.spawn([process.execPath, new URL("./create-pglite.ts", import.meta.url).pathname, dataDir], {
    stdin: "ignore",
    stdout: "ignore",
    stderr: "pipe",
  });
  const [code, said] = await Promise.all([maker.exited, new Response(maker.stderr).text()]);
  if (code !== 0) throw new Error(`the embedded database in ${dataDir} could not be made: ${said.trim()}`);
}

async function openPglite(dataDir: string): Promise<DatabaseHandle> {
  const { PGlite } = await import("@electric-sql/pglite");
  const { pg_trgm } = await import("@electric-sql/pglite/contrib/pg_trgm");
  const { drizzle } = await import("drizzle-orm/pglite");
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const unlock = lockDataDir(dataDir);
  await createPglite(dataDir);
  const client = await PGlite.create(dataDir, {
    extensions: { pg_trgm },
    startParams: [...PGlite.defaultStartParams, "-c", `shared_buffers=${config.database.embeddedSharedBuffersMb}MB`],
  });
  // PGlite unpacks a new database's files 0666 and rewrites some 0644 as it starts, whatever the umask.
  makePrivate(dataDir);
  return {
    db: guardTransactions(drizzle(client) as unknown as Database),
    kind: "pglite",
    close: async () => {
      await client.close();
      unlock();
    },
  };
}

/** Opens the database the settings name: PostgreSQL at DATABASE_URL, else PGlite in DATA_DIR. */
export function openDatabase(
  settings: { url?: string; dataDir: string; poolSize: number } = config.database,
): Promise<DatabaseHandle> {
  return settings.url ? openPostgres(settings.url, settings.poolSize) : openPglite(settings.dataDir);
}

const opened = installed<DatabaseHandle>("the database");

/** Puts the handle the root opened in place of the process's database (undefined: none). */
export function useDatabase(handle: DatabaseHandle | undefined): void {
  opened.install(handle);
}

/** The process's database, as the root opened it. */
export const database: DatabaseHandle = {
  get db() {
    return opened().db;
  },
  get kind() {
    return opened().kind;
  },
  close: () => opened().close(),
};

/** The process's drizzle handle: every use reaches the handle the root put in place. */
export const db: Database = new Proxy({} as Database, {
  get: (_target, property) => Reflect.get(opened().db, property),
});

export async function pingDatabase(): Promise<void> {
  await db.execute(sql`select 1`);
}
