/**
 * postgres.js 3.4.9 throws from a timer, where no caller can catch it, when a transaction's
 * backend dies mid-query: its ROLLBACK is written to the closed socket (porsager/postgres#1208).
 * That killed the cdr worker (whose folds are transactions) when PostgreSQL went away. A child
 * process does exactly that through Parley's database handle and must live on.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type PrivatePostgres, startPrivatePostgres } from "../support/private-postgres";
import { until } from "../support/wait";

const script = new URL("../support/transaction-cut.ts", import.meta.url).pathname;

describe("a transaction whose backend dies", () => {
  let postgres: PrivatePostgres;

  beforeAll(async () => {
    postgres = await startPrivatePostgres();
  });

  afterAll(() => postgres?.destroy());

  test("is rejected as a closed connection, and the process lives on", async () => {
    const child = Bun.spawn([process.execPath, script], {
      env: { ...process.env, DATABASE_URL: postgres.url, LOG_LEVEL: "silent" },
      stdout: "pipe",
      stderr: "pipe",
    });
    let output = "";
    const reader = (async () => {
      for await (const chunk of child.stdout) output += new TextDecoder().decode(chunk);
    })();
    const pid = await until(() => /pid (\d+)/.exec(output)?.[1], Boolean, 15_000, 50);
    expect(pid).toBeDefined();
    const { default: connect } = await import("postgres");
    const killer = connect(postgres.url, { max: 1, onnotice: () => {} });
    await killer`select pg_terminate_backend(${Number(pid)})`;
    await killer.end();
    const code = await Promise.race([child.exited, Bun.sleep(15_000).then(() => "hung")]);
    await reader;
    const stderr = await new Response(child.stderr).text();
    expect({ code, stderr: stderr.includes("TypeError") ? stderr : "" }).toEqual({ code: 0, stderr: "" });
    expect(output).toContain("rejected");
    expect(output).toContain("survived");
  }, 40_000);
});
