import { expect, test } from "bun:test";
import { cpSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { spawnSync } from "bun";
import { sql } from "drizzle-orm";
import { type Database, db, guardTransactions } from "../../src/db/client";
import { accounts } from "../../src/modules/accounts/schema";
import { eventsByIds } from "../../src/modules/conference-log/reads";
import { mapperIdFor } from "../../src/modules/mapper/service";
import { migratedDataDir } from "../support/parley";

const GUARD = /global database handle was used inside a transaction/;

/** Settles within the time or says it hung, so a deadlock fails the test instead of stalling it. */
function within<T>(promise: Promise<T>, ms: number): Promise<T> {
  return Promise.race([promise, Bun.sleep(ms).then(() => Promise.reject(new Error(`still waiting after ${ms} ms`)))]);
}

test("on PostgreSQL, the global handle refuses work inside a transaction, directly or through a service", async () => {
  // Under another name the linter cannot see the handle; the guard still does.
  const shared = db;
  await expect(db.transaction(async () => shared.select().from(accounts))).rejects.toThrow(GUARD);
  await expect(db.transaction(async () => eventsByIds([1]))).rejects.toThrow(GUARD);
  // A query built once on the handle (the mapper's look-up) is refused there too.
  await expect(db.transaction(async () => mapperIdFor("acc_none", "room@conference.example.com"))).rejects.toThrow(
    GUARD,
  );
  await expect(
    db.transaction(async () => shared.transaction(async (inner) => inner.execute(sql`select 1`))),
  ).rejects.toThrow(GUARD);
  // The transaction's own handle works, and the refusal rolled nothing else back.
  const [row] = await db.transaction(async (tx) =>
    tx.execute(sql`select 1 as one`).then((result) => [...(result as unknown as Array<{ one: number }>)]),
  );
  expect(row).toEqual({ one: 1 });
});

test("a transaction in flight does not mark queries that run beside it", async () => {
  let release!: () => void;
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  const open = db.transaction(async (tx) => {
    await tx.execute(sql`select 1`);
    await held;
  });
  await Bun.sleep(20);
  expect(await db.execute(sql`select 2 as two`)).toHaveLength(1);
  release();
  await open;
  // After the transaction, the same async flow uses the global handle again.
  expect(await db.execute(sql`select 3 as three`)).toHaveLength(1);
});

test("on PGlite, the misuse fails at once instead of deadlocking", async () => {
  const { PGlite } = await import("@electric-sql/pglite");
  const { drizzle } = await import("drizzle-orm/pglite");
  // On a copy of a migrated folder: a new one would cost PGlite's initdb, seconds of CPU.
  const dataDir = mkdtempSync(join(tmpdir(), "parley-guard-pglite-"));
  await migratedDataDir(dataDir);
  const client = await PGlite.create(dataDir);
  try {
    const embedded = guardTransactions(drizzle(client) as unknown as Database);
    await expect(
      within(
        embedded.transaction(async () => embedded.execute(sql`select 1`)),
        5_000,
      ),
    ).rejects.toThrow(GUARD);
    // The mutex was released: the database still answers, inside and outside a transaction.
    expect(
      await within(
        embedded.transaction(async (tx) => tx.execute(sql`select 1 as one`)),
        5_000,
      ),
    ).toMatchObject({ rows: [{ one: 1 }] });
    expect(await within(embedded.execute(sql`select 2 as two`), 5_000)).toMatchObject({ rows: [{ two: 2 }] });
  } finally {
    await client.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

/**
 * Lints source text as a file of the project: a scratch folder's configuration extends the
 * project's (and its plugins, which resolve beside the configuration that uses them).
 */
function lint(source: string): string {
  const dir = mkdtempSync(join(tmpdir(), "parley-lint-"));
  try {
    cpSync(resolve(".ci/lint"), join(dir, "lint"), { recursive: true });
    writeFileSync(
      join(dir, "biome.json"),
      JSON.stringify({ root: true, extends: [resolve(".ci/biome.json")], files: { includes: ["**"] } }),
    );
    writeFileSync(join(dir, "service.ts"), source);
    const result = spawnSync(
      [resolve("node_modules/.bin/biome"), "lint", "--config-path", dir, join(dir, "service.ts")],
      { stdout: "pipe", stderr: "pipe", timeout: 20_000 },
    );
    return `${result.stdout.toString()}${result.stderr.toString()}`;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test("the linter flags the global handle inside a transaction callback and helpers that default to it", () => {
  const header =
    `import { type Database, db } from "../../db/client";\n` + `import { accounts } from "../accounts/schema";\n`;
  const inside = lint(`${header}export async function f(read: (e: Database) => Promise<unknown>) {
  return db.transaction(async (tx) => {
    await tx.select().from(accounts);
    await db.select().from(accounts);
    return read(db);
  });
}
`);
  expect(inside.match(/Inside a transaction use only its handle/g)).toHaveLength(2);
  expect(inside).toContain("await db.select().from(accounts);");
  expect(inside).toContain("return read(db);");

  const defaulted = lint(`${header}export async function rows(executor: Database = db) {
  return executor.select().from(accounts);
}
`);
  expect(defaulted).toContain("Do not default a query executor to the global `db`");

  const clean = lint(`${header}export async function g(tx: Database, x = { db: 1 }) {
  await db.transaction(async (inner) => inner.select().from(accounts));
  return [await tx.select().from(accounts), x.db, await db.select().from(accounts)];
}
`);
  expect(clean).toContain("Checked 1 file");
  expect(clean).not.toContain("plugin");
});
