/**
 * The composition root (src/process/root.ts): a process's services stop in reverse order of
 * building, each still standing on what was built before it; on the embedded database the one
 * process keeps publish/subscribe and the broker to itself, so nothing of it subscribes on
 * Redis, while a process on PostgreSQL rings other processes through Redis. Each process is
 * built in a child of its own, so this file's own services (test/setup.ts) stay in place.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Stoppers } from "../src/process/root";

const ROOT = join(import.meta.dir, "..");
const dataDir = mkdtempSync(join(tmpdir(), "parley-root-"));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

test("stoppers stop in reverse order; one that fails leaves the others to stop, then is raised", async () => {
  const stopped: string[] = [];
  const stoppers = new Stoppers();
  stoppers.push("first", () => stopped.push("first"));
  stoppers.push("second", () => {
    stopped.push("second");
    throw new Error("second would not stop");
  });
  stoppers.push("third", async () => {
    await Bun.sleep(5);
    stopped.push("third");
  });
  expect(stoppers.pending()).toEqual(["third", "second", "first"]);
  await expect(stoppers.stop()).rejects.toThrow("second would not stop");
  expect(stopped).toEqual(["third", "second", "first"]);
  expect(stoppers.pending()).toEqual([]);
  // Each once: a second stop has nothing left.
  await stoppers.stop();
  expect(stopped).toHaveLength(3);
});

/**
 * Builds a process in a child as `kind` on `env` (the whole environment), registers an outbox consumer and rings it,
 * pushes a probe that stops first, stops the process, and reports what it saw.
 */

/** Runs `script` in a Bun child of its own (a process built apart from this one) and answers its last line out. */
async function lastLineOf(script: string, env: Record<string, string | undefined>): Promise<string> {
  const child = Bun.spawn([process.execPath, "-e", script], { cwd: ROOT, env, stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
    child.exited,
  ]);
  if (code !== 0) throw new Error(`the child exited ${code}: ${err}`);
  return out.trim().split("\n").at(-1)!;
}

async function builtProcess(kind: string, env: Record<string, string | undefined>) {
  const script = `
    const { existsSync } = await import("node:fs");
    const { sql } = await import("drizzle-orm");
    const { buildProcess } = await import("./src/process/root.ts");
    const { LocalPubSub } = await import("./src/core/pubsub.ts");
    const { LocalBroker } = await import("./src/realtime/local-broker.ts");
    const { db } = await import("./src/db/client.ts");
    const { redis, redisKey } = await import("./src/queue/connection.ts");
    const services = await buildProcess(${JSON.stringify(kind)});
    let rungWith;
    const consumer = services.outbox.register({
      name: "probe",
      sweepEveryMs: 600000,
      async drain(due) { rungWith = due === "sweep" ? due : [...due]; return 0; },
    });
    await consumer.ready;
    services.outbox.ring({}, "probe", ["key-1"]);
    while (rungWith === undefined) await Bun.sleep(10);
    // The channels under this process's prefix that something subscribes to, as Redis counts them.
    const subscribed = await redis().call("PUBSUB", "CHANNELS", redisKey("*"));
    const built = services.stoppers.pending();
    const seen = [];
    // Pushed last, as a role is: stopped first, while the database and Redis it stands on still answer.
    services.stoppers.push("probe", async () => {
      await db.execute(sql\`select 1\`);
      await redis().ping();
      await consumer.stop();
      seen.push("probe stopped on an open database and Redis");
    });
    await services.stop();
    let after;
    try { db.select; after = "still in place"; } catch (error) { after = error.message; }
    console.log(JSON.stringify({
      alone: services.alone,
      localPubSub: services.pubsub instanceof LocalPubSub,
      broker: services.broker === undefined ? "none" : services.broker instanceof LocalBroker ? "local" : "redis",
      rungWith, subscribed, built, seen, after,
      lockLeft: existsSync(${JSON.stringify(join(dataDir, "parley.pid"))}),
    }));
    process.exit(0);`;
  return JSON.parse(await lastLineOf(script, env));
}

test("embedded: the one process rings in itself, nothing subscribes on Redis; it stops in reverse", async () => {
  const { DATABASE_URL: _embedded, ...env } = process.env;
  const seen = await builtProcess("supervisor", { ...env, DATA_DIR: dataDir, REALTIME_BROKER: "auto" });
  expect(seen.alone).toBe(true);
  expect(seen.localPubSub).toBe(true);
  expect(seen.broker).toBe("local");
  expect(seen.rungWith).toEqual(["key-1"]);
  expect(seen.subscribed).toEqual([]);
  expect(seen.built).toEqual([
    "broker",
    "object store",
    "outbox",
    "publish/subscribe",
    "queues",
    "redis connections",
    "database",
  ]);
  expect(seen.seen).toEqual(["probe stopped on an open database and Redis"]);
  // Stopped last, the database gave its folder's lock back and left its place.
  expect(seen.lockLeft).toBe(false);
  expect(seen.after).toContain("the database is not in place");
}, 60_000);

test("on PostgreSQL a worker's process rings the others through Redis and has no broker", async () => {
  const prefix = `parley-test-root-${crypto.randomUUID()}`;
  const seen = await builtProcess("cdr", { ...process.env, REDIS_PREFIX: prefix });
  expect(seen.alone).toBe(false);
  expect(seen.localPubSub).toBe(false);
  expect(seen.broker).toBe("none");
  expect(seen.rungWith).toEqual(["key-1"]);
  expect(seen.subscribed).toEqual([`${prefix}:outbox:probe`]);
  expect(seen.built).toEqual([
    "object store",
    "outbox",
    "publish/subscribe",
    "queues",
    "redis connections",
    "database",
  ]);
  expect(seen.seen).toEqual(["probe stopped on an open database and Redis"]);
});

/** The PostgreSQL connections a process built as `kind` opens for `queries` queries held at once. */
async function connectionsAtOnce(kind: string, queries: number): Promise<number> {
  const script = `
    const { sql } = await import("drizzle-orm");
    const { buildProcess } = await import("./src/process/root.ts");
    const { db } = await import("./src/db/client.ts");
    const services = await buildProcess(${JSON.stringify(kind)});
    const held = () => db.execute(sql\`select pg_backend_pid() as pid, pg_sleep(0.3)\`);
    const rows = (await Promise.all(Array.from({ length: ${queries} }, held))).flat();
    console.log(new Set(rows.map((row) => row.pid)).size);
    await services.stop();
    process.exit(0);`;
  const env = { ...process.env, DATABASE_POOL_SIZE: "3", REDIS_PREFIX: `parley-test-root-${crypto.randomUUID()}` };
  return Number(await lastLineOf(script, env));
}

test("a process of several worker roles holds DATABASE_POOL_SIZE connections for each of them", async () => {
  // The roles together wait for a connection no more than each did in a process of its own.
  expect(await connectionsAtOnce("cdr,webhooks", 10)).toBe(6);
  expect(await connectionsAtOnce("cdr", 10)).toBe(3);
}, 60_000);
