/** How a benchmark run by hand starts: on a database it is given, with its own Redis prefix and no logs. */
import type { Subprocess } from "bun";

/**
 * Points Parley at BENCH_DATABASE_URL (else TEST_DATABASE_URL), or ends the run saying what it
 * needs when neither is set. Called before any of Parley's modules loads: they read it once.
 */
export function benchDatabase(needed: string): string {
  const databaseUrl = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL;
  if (!databaseUrl) {
    console.error(`set ${needed}`);
    process.exit(2);
  }
  process.env.DATABASE_URL = databaseUrl;
  process.env.REDIS_PREFIX = `parley-bench-${process.pid}`;
  process.env.LOG_LEVEL = "silent";
  return databaseUrl;
}

/** The middle value of a run's figures (the upper one of the two middle ones when they are even). */
export const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

/** Drops everything in the database, for a benchmark that starts from an empty one. */
export async function wipeDatabase(databaseUrl: string): Promise<void> {
  const { default: postgres } = await import("postgres");
  const admin = postgres(databaseUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(
    "drop schema if exists public cascade; drop schema if exists drizzle cascade; create schema public;",
  );
  await admin.end();
}

/**
 * The bench's own process, built as an API process is (src/process/root.ts: the database, Redis
 * and the rest put in place), its database migrated. Called once benchDatabase has set the
 * environment, since Parley's modules read it as they load.
 */
export async function startBench(): Promise<{ stop(): Promise<void> }> {
  const services = await (await import("../../src/process/root")).buildProcess("api");
  await (await import("../../src/db/migrate")).migrate();
  return services;
}

/** The end of a run: the run's Redis keys removed, then the bench's process stopped, every connection closed. */
export async function closeBench(services: { stop(): Promise<void> }): Promise<void> {
  const { redis } = await import("../../src/queue/connection");
  const keys = await redis().keys(`${process.env.REDIS_PREFIX}:*`);
  if (keys.length > 0) await redis().del(...keys);
  await services.stop();
}

/** Resolves once `url` answers at all (any status); throws if `child` exits or `withinMs` passes first. */
export async function serverListening(url: string, child: Subprocess, withinMs: number): Promise<void> {
  const deadline = Date.now() + withinMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`server exited with ${child.exitCode}`);
    const answered = await fetch(url, { signal: AbortSignal.timeout(1_000) }).then(
      () => true,
      () => false,
    );
    if (answered) return;
    await Bun.sleep(50);
  }
  throw new Error(`no server at ${url}`);
}
