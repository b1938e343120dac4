/**
 * Parley started with a REDIS_URL or DATABASE_URL that nothing answers on: what it says names
 * the setting, the address and the error, and what works meanwhile. With Redis away the API
 * serves and the ready line still comes; with the database away it waits, saying so.
 */
import { expect, test } from "bun:test";
import { spawnParley } from "./support/parley";
import { freePort } from "./support/ports";
import { until } from "./support/wait";

test("an unreachable REDIS_URL: one warning naming it, its address, the error and what works; then ready", async () => {
  const address = `redis://127.0.0.1:${await freePort()}`;
  const { parley } = await spawnParley({ embedded: true, asReader: true, env: { REDIS_URL: address } });
  try {
    const said = await until(
      () => parley.tail(200),
      (text) => text.includes('"msg":"parley ready"'),
      60_000,
    );
    const warnings = said.split("\n").filter((line) => line.includes('"level":40'));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain(`Redis at REDIS_URL ${address} cannot be reached (connect ECONNREFUSED`);
    expect(warnings[0]).toContain("Meanwhile tokens, scheduling");
    // What the warning says works, does.
    const answer = await fetch(`${parley.base}/api/v1/misc/generate-token`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ apiKey: await parley.firstApiKey(), scope: "messaging" }),
    });
    expect(answer.status).toBe(200);
  } finally {
    await parley.stop("SIGTERM", 10_000);
    parley.cleanup();
  }
}, 90_000);

test("an unreachable DATABASE_URL: it waits, naming the setting, the address (no password) and the error", async () => {
  const port = await freePort();
  const { parley } = await spawnParley({
    embedded: false,
    asReader: true,
    env: { DATABASE_URL: `postgres://parley:secret@127.0.0.1:${port}/parley` },
  });
  try {
    const said = await until(
      () => parley.tail(50),
      (text) => text.includes("waiting for the database"),
      20_000,
    );
    const line = said.split("\n").find((text) => text.includes("waiting for the database"))!;
    expect(line).toContain(`waiting for the database at DATABASE_URL postgres://127.0.0.1:${port}/parley (`);
    expect(line).toContain("ECONNREFUSED");
    expect(line).toContain("Nothing is served until it answers");
    expect(line).not.toContain("secret");
    expect(parley.process.exitCode).toBeNull();
  } finally {
    await parley.stop("SIGTERM", 10_000);
    parley.cleanup();
  }
}, 60_000);
