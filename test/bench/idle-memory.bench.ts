/**
 * Idle memory benchmark, run by hand: `npx bun test/bench/idle-memory.bench.ts [seconds]`, with
 * BENCH_DATABASE_URL (else TEST_DATABASE_URL) for the PostgreSQL part (its database is emptied first).
 * Starts `npm start`'s command, `bun src/index.ts`, with its defaults: on the embedded database in a
 * new DATA_DIR (a first start), again on that folder (a restart), then on PostgreSQL with the
 * default pool. Once it answers and `seconds` (20) have passed, reads every process it started
 * (/proc/<pid>/status and smaps_rollup): its resident memory, anonymous and mapped from files, and
 * its proportional share (PSS: a page shared by n processes, Bun's own code above all, counts 1/n).
 * Targets: the embedded default ≤ 200 MB, the PostgreSQL pool ≤ 300 MB, in resident memory summed
 * over the processes; the run exits 1 when one is not met.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { wipeDatabase } from "../support/bench";
import { freePort } from "../support/ports";
import { childPids, commandLine, eventually } from "../support/wait";

const seconds = Number(process.argv[2] ?? 20);
const ENTRY = resolve(import.meta.dir, "../../src/index.ts");
const MB = 1024;

interface Figures {
  pid: number;
  role: string;
  rss: number;
  anon: number;
  file: number;
  pss: number;
}

/** A /proc file's field in kB, 0 once the process is gone. */
function kilobytes(path: string, field: string): number {
  try {
    const match = readFileSync(path, "utf8").match(new RegExp(`^${field}:\\s+(\\d+) kB`, "m"));
    return Number(match?.[1] ?? 0);
  } catch {
    return 0;
  }
}

function roleOf(pid: number): string {
  const line = commandLine(pid);
  if (line.includes("redis-server")) return "redis-server";
  return line.match(/--role=([\w,]+)/)?.[1] ?? "supervisor";
}

/** The process and all it started, depth first. */
function tree(pid: number): number[] {
  return [pid, ...childPids(pid).flatMap(tree)];
}

function figuresOf(pid: number): Figures {
  const status = `/proc/${pid}/status`;
  return {
    pid,
    role: roleOf(pid),
    rss: kilobytes(status, "VmRSS"),
    anon: kilobytes(status, "RssAnon"),
    file: kilobytes(status, "RssFile"),
    pss: kilobytes(`/proc/${pid}/smaps_rollup`, "Pss"),
  };
}

/** `databaseUrl` undefined: the embedded database. */
async function idleMemory(name: string, databaseUrl: string | undefined, dataDir: string): Promise<Figures[]> {
  const port = await freePort();
  const sipPort = await freePort();
  const { DATABASE_URL: _ours, ...inherited } = process.env as Record<string, string>;
  const child = Bun.spawn([process.execPath, ENTRY], {
    env: {
      ...inherited,
      ...(databaseUrl && { DATABASE_URL: databaseUrl }),
      DATA_DIR: dataDir,
      PORT: String(port),
      HOST: "127.0.0.1",
      METRICS_PORT: "0",
      SIP_BIND_ADDRESS: "127.0.0.1",
      SIP_UDP_PORT: String(sipPort),
      SIP_TCP_PORT: String(sipPort),
      LOG_LEVEL: "warn",
      REDIS_PREFIX: `parley-bench-${process.pid}-${name.replaceAll(" ", "-")}`,
    },
    stdout: "inherit",
    stderr: "inherit",
  });
  const started = performance.now();
  const ready = await eventually(
    () =>
      fetch(`http://127.0.0.1:${port}/readyz`)
        .then((answer) => answer.ok)
        .catch(() => false),
    120_000,
  );
  if (!ready) throw new Error(`${name}: Parley did not answer /readyz within 120 s`);
  const readyMs = performance.now() - started;
  await Bun.sleep(seconds * 1000);
  const figures = tree(child.pid).map(figuresOf);
  child.kill("SIGTERM");
  await child.exited;
  const sum = (key: keyof Figures) => figures.reduce((total, each) => total + (each[key] as number), 0);
  const mb = (kb: number) => (kb / MB).toFixed(1).padStart(6);
  console.log(`\n${name}: ready after ${(readyMs / 1000).toFixed(1)} s, read ${seconds} s later`);
  console.log(`${"process".padEnd(14)}    RSS   anon   file    PSS (MB)`);
  for (const each of figures) {
    console.log(`${each.role.padEnd(14)} ${mb(each.rss)} ${mb(each.anon)} ${mb(each.file)} ${mb(each.pss)}`);
  }
  console.log(`${"all".padEnd(14)} ${mb(sum("rss"))} ${mb(sum("anon"))} ${mb(sum("file"))} ${mb(sum("pss"))}`);
  return figures;
}

/** Whether the processes' resident memory summed is within `ceilingMb`, said either way. */
function judged(name: string, figures: Figures[], ceilingMb: number): boolean {
  const total = figures.reduce((sum, each) => sum + each.rss, 0) / MB;
  const met = total <= ceilingMb;
  const verdict = met ? "met" : "not met";
  console.log(`${name}: ${total.toFixed(1)} MB in ${figures.length} processes (target ≤ ${ceilingMb} MB, ${verdict})`);
  return met;
}

console.log(`load ${readFileSync("/proc/loadavg", "utf8").trim()}`);
const results: boolean[] = [];
const embeddedDir = mkdtempSync(join(tmpdir(), "parley-idle-"));
try {
  const first = await idleMemory("embedded, first start", undefined, embeddedDir);
  const again = await idleMemory("embedded, restart", undefined, embeddedDir);
  results.push(judged("embedded, first start", first, 200), judged("embedded, restart", again, 200));
} finally {
  rmSync(embeddedDir, { recursive: true, force: true });
}

const databaseUrl = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL;
if (databaseUrl) {
  await wipeDatabase(databaseUrl);
  const dataDir = mkdtempSync(join(tmpdir(), "parley-idle-"));
  try {
    const pool = await idleMemory("PostgreSQL pool", databaseUrl, dataDir);
    results.push(judged("PostgreSQL pool", pool, 300));
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
} else {
  console.log("PostgreSQL pool: skipped (set BENCH_DATABASE_URL or TEST_DATABASE_URL)");
}
if (results.includes(false)) process.exitCode = 1;
