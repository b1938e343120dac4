import { expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { db } from "../../src/db/client";
import { executePrepared } from "../../src/db/prepared";
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

test("executePrepared runs its statement under PostgreSQL's own plan choice, and only that statement", async () => {
  const modes = await db.transaction(async (tx) => {
    const during = rowsOf<{ mode: string }>(
      await executePrepared(tx, sql`select current_setting('plan_cache_mode') as mode, ${1}::int as one`),
    )[0]?.mode;
    const after = rowsOf<{ plan_cache_mode: string }>(await tx.execute(sql`show plan_cache_mode`))[0]?.plan_cache_mode;
    return { during, after };
  });
  expect(modes).toEqual({ during: "auto", after: "force_custom_plan" });
  // Outside a transaction it is an ordinary statement (the mode can only change for a transaction).
  const outside = rowsOf<{ mode: string }>(
    await executePrepared(db, sql`select current_setting('plan_cache_mode') as mode`),
  )[0]?.mode;
  expect(outside).toBe("force_custom_plan");
});

test("an error in the prepared statement fails the transaction, with that statement's error", async () => {
  await expect(db.transaction(async (tx) => executePrepared(tx, sql`select 1 / ${0}::int as broken`))).rejects.toThrow(
    /division by zero/,
  );
  // The pool is fine afterwards, and its connections are back in the default mode.
  const mode = rowsOf<{ plan_cache_mode: string }>(await db.execute(sql`show plan_cache_mode`))[0]?.plan_cache_mode;
  expect(mode).toBe("force_custom_plan");
});
