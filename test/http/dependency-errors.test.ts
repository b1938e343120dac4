/**
 * Which errors mean "a dependency is down" (503 dependency_down, no crash) and which are bugs
 * or bad input, with the errors the real drivers raise: postgres.js against a port nothing
 * listens on, through drizzle as Parley calls it; PGlite once closed; ioredis with no server.
 */
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "drizzle-orm";
import { Redis } from "ioredis";
import { dependencyFailure, isDependencyDown, loggableError } from "../../src/core/errors";
import { migratedDataDir } from "../support/parley";
import { freePort } from "../support/ports";

async function failureOf(run: () => Promise<unknown>): Promise<unknown> {
  try {
    await run();
  } catch (error) {
    return error;
  }
  throw new Error("expected a failure");
}

describe("dependency failures", () => {
  test("postgres.js refused a connection, seen through drizzle", async () => {
    const { default: postgres } = await import("postgres");
    const { drizzle } = await import("drizzle-orm/postgres-js");
    const client = postgres(`postgres://postgres@127.0.0.1:${await freePort()}/none`, {
      max: 1,
      connect_timeout: 2,
      onnotice: () => {},
    });
    const error = await failureOf(() => drizzle(client).execute(sql`select 1`));
    expect(isDependencyDown(error)).toBe(true);
    expect(dependencyFailure(error)).toContain("ECONNREFUSED");
    await client.end({ timeout: 1 });
  });

  test("a query PostgreSQL refuses is not an outage", async () => {
    const { db } = await import("../../src/db/client");
    const syntax = await failureOf(() => db.execute(sql`select from nowhere at all`));
    expect(isDependencyDown(syntax)).toBe(false);
    const nul = await failureOf(() => db.execute(sql`select ${"a\u0000b"}::text`));
    expect(isDependencyDown(nul)).toBe(false);
  });

  test("a write refused by a read-only server (a standby's answer) is an outage, not a bug", async () => {
    const { db } = await import("../../src/db/client");
    const refused = await failureOf(() =>
      db.transaction(async (tx) => {
        await tx.execute(sql`set transaction read only`);
        await tx.execute(sql`create table never_made (id int)`);
      }),
    );
    expect(isDependencyDown(refused)).toBe(true);
    expect(dependencyFailure(refused)).toContain("read-only transaction");
  });

  test("PGlite once closed", async () => {
    const { PGlite } = await import("@electric-sql/pglite");
    // On a copy of a migrated folder: a new one would cost PGlite's initdb, seconds of CPU.
    const dataDir = mkdtempSync(join(tmpdir(), "parley-closed-pglite-"));
    try {
      await migratedDataDir(dataDir);
      const pglite = await PGlite.create(dataDir);
      await pglite.close();
      expect(isDependencyDown(await failureOf(() => pglite.query("select 1")))).toBe(true);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test("ioredis with no server behind it", async () => {
    const client = new Redis({
      port: await freePort(),
      host: "127.0.0.1",
      maxRetriesPerRequest: 0,
      lazyConnect: true,
      retryStrategy: () => null,
    });
    client.on("error", () => {});
    const error = await failureOf(() => client.connect().then(() => client.ping()));
    expect(isDependencyDown(error)).toBe(true);
    client.disconnect();
    expect(isDependencyDown(await failureOf(() => client.ping()))).toBe(true);
  });

  test("an unexpected query failure is logged with the driver code and statement, never its parameters", async () => {
    const { db } = await import("../../src/db/client");
    const failed = await failureOf(() => db.execute(sql`select ${"secret-caller-data"}::int`));
    const logged = loggableError(failed);
    expect(JSON.stringify(logged)).not.toContain("secret-caller-data");
    expect(logged.causes[0]!.message).toStartWith("failed query: select $1::int");
    expect(logged.causes.some((cause) => cause.code === "22P02")).toBe(true);
    expect(logged.stack).toContain("    at ");
    const bug = loggableError(new TypeError("cannot read properties of undefined"));
    expect(bug.causes).toEqual([{ message: "cannot read properties of undefined" }]);
    expect(bug.stack).toStartWith("TypeError: cannot read properties of undefined");
  });

  test("a plain bug is not an outage", () => {
    expect(isDependencyDown(new TypeError("cannot read properties of undefined"))).toBe(false);
    expect(isDependencyDown("ECONNREFUSED")).toBe(false);
    expect(isDependencyDown(undefined)).toBe(false);
  });
});
