import { expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "drizzle-orm";
import { db } from "../../src/db/client";
import { executePlannedOnce } from "../../src/db/planned-once";
import { rowsOf } from "../../src/db/rows";

test("a statement with parameters runs prepared on its connection, planned for its own values", async () => {
  const marker = `prepared_${process.pid}_${Date.now()}`;
  const [statement] = await db.transaction(async (tx) => {
    // Past the five runs after which PostgreSQL may settle on one plan for any values.
    for (let run = 0; run < 7; run++) await tx.execute(sql`select ${run}::int as ${sql.identifier(marker)}`);
    return rowsOf<{ statement: string; generic_plans: string; custom_plans: string }>(
      await tx.execute(
        sql`select statement, generic_plans, custom_plans from pg_prepared_statements where statement like ${`%${marker}%`}`,
      ),
    );
  });
  // An unnamed statement leaves nothing behind: this one is kept by its connection, parsed once and
  // planned on each run for that run's value.
  expect(statement?.statement).toBe(`select $1::int as "${marker}"`);
  expect({ generic: Number(statement?.generic_plans), custom: Number(statement?.custom_plans) }).toEqual({
    generic: 0,
    custom: 7,
  });
});

test("a statement of many parameters (a batch write, whose text changes with its size) is not kept", async () => {
  const marker = `batch_${process.pid}_${Date.now()}`;
  const values = Array.from({ length: 40 }, (_, i) => i);
  const kept = await db.transaction(async (tx) => {
    await tx.execute(
      sql`select ${sql.join(
        values.map((value) => sql`${value}::int`),
        sql`, `,
      )}, 1 as ${sql.identifier(marker)}`,
    );
    await tx.execute(sql`select ${1}::int, 2 as ${sql.identifier(`${marker}_small`)}`);
    return rowsOf<{ statement: string }>(
      await tx.execute(sql`select statement from pg_prepared_statements where statement like ${`%${marker}%`}`),
    ).map((row) => row.statement);
  });
  expect(kept).toEqual([`select $1::int, 2 as "${marker}_small"`]);
});

test("executePlannedOnce runs its statement under PostgreSQL's own plan choice, and only that statement", async () => {
  const modes = await db.transaction(async (tx) => {
    const during = rowsOf<{ mode: string }>(
      await executePlannedOnce(tx, sql`select current_setting('plan_cache_mode') as mode, ${1}::int as one`),
    )[0]?.mode;
    const after = rowsOf<{ plan_cache_mode: string }>(await tx.execute(sql`show plan_cache_mode`))[0]?.plan_cache_mode;
    return { during, after };
  });
  expect(modes).toEqual({ during: "auto", after: "force_custom_plan" });
  // Outside a transaction it is an ordinary statement (the mode can only change for a transaction).
  const outside = rowsOf<{ mode: string }>(
    await executePlannedOnce(db, sql`select current_setting('plan_cache_mode') as mode`),
  )[0]?.mode;
  expect(outside).toBe("force_custom_plan");
});

test("an error in the prepared statement fails the transaction, with that statement's error", async () => {
  await expect(
    db.transaction(async (tx) => executePlannedOnce(tx, sql`select 1 / ${0}::int as broken`)),
  ).rejects.toThrow(/division by zero/);
  // The pool is fine afterwards, and its connections are back in the default mode.
  const mode = rowsOf<{ plan_cache_mode: string }>(await db.execute(sql`show plan_cache_mode`))[0]?.plan_cache_mode;
  expect(mode).toBe("force_custom_plan");
});

test("a pooled connection idle for DATABASE_IDLE_SECONDS is closed, and opened again when needed", async () => {
  // A process of its own, since the pool reads its settings once; it reports the backends its queries
  // ran on, waits while idle until told to go on, then queries once more.
  const script = `
    const { buildProcess } = await import(${JSON.stringify(join(import.meta.dir, "../../src/process/root.ts"))});
    const services = await buildProcess("cdr");
    const { db } = await import(${JSON.stringify(join(import.meta.dir, "../../src/db/client.ts"))});
    const { sql: q } = await import("drizzle-orm");
    const pid = async () => [...(await db.execute(q\`select pg_backend_pid() as pid, pg_sleep(0.2)\`))][0].pid;
    console.log(JSON.stringify(await Promise.all([pid(), pid(), pid()])));
    while ((await Bun.file(process.env.GO_FILE).exists()) === false) await Bun.sleep(50);
    console.log(JSON.stringify([await pid()]));
    await services.stop();`;
  const go = join(mkdtempSync(join(tmpdir(), "parley-idle-")), "go");
  const child = Bun.spawn([process.execPath, "-e", script], {
    cwd: join(import.meta.dir, "../.."),
    env: { ...process.env, DATABASE_IDLE_SECONDS: "1", DATABASE_POOL_SIZE: "3", GO_FILE: go },
    stdout: "pipe",
  });
  try {
    const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    const first = JSON.parse((await lines.read()).value!) as number[];
    expect(new Set(first).size).toBe(3);
    const alive = async () =>
      rowsOf<{ pid: number }>(
        await db.execute(sql`select pid from pg_stat_activity where pid = any(${`{${first.join(",")}}`}::int[])`),
      ).length;
    expect(await alive()).toBe(3);
    // Closed once idle for a second (the ceiling leaves room for a busy machine).
    for (let waited = 0; (await alive()) > 0 && waited < 10_000; waited += 100) await Bun.sleep(100);
    expect(await alive()).toBe(0);
    writeFileSync(go, "");
    const again = JSON.parse((await lines.read()).value!) as number[];
    expect(first).not.toContain(again[0]);
    expect(await child.exited).toBe(0);
  } finally {
    child.kill();
  }
});
