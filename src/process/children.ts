/**
 * The supervisor's child processes on PostgreSQL, and the announcement once the API answers. This module
 * and what it imports are all an idle supervisor on PostgreSQL loads (src/index.ts imports it alone).
 */
import { existsSync } from "node:fs";
import { join, relative } from "node:path";
import { type Subprocess, spawn } from "bun";
import { config } from "../core/config";
import { onStopSignal, STOP_MARGIN_MS } from "../core/lifecycle";
import { log, readableLogs } from "../core/log";
import { LOCAL_SOCKET_FLAG } from "../modules/admin/local";
import { isRoleEnabled, PREPARE_FLAG, ROLES, type Role, SUPERVISOR_FLAG } from "./roles";

const RESTART_DELAY_MIN_MS = 500;
const RESTART_DELAY_MAX_MS = 30_000;
/** A child that lived this long is considered healthy again, and its restart delay resets. */
const HEALTHY_AFTER_MS = 30_000;

/** A role's exit when a listener cannot bind: restarting it would fail the same way, so the supervisor stops. */
export const CANNOT_LISTEN_EXIT_CODE = 78;

/**
 * The worker roles' child processes on PostgreSQL: the enabled ones together in one (WORKER_PROCESSES=shared),
 * which saves each role the some 55 MB a Bun process costs before its work, or each in its own (per-role).
 */
function workerProcesses(): Role[][] {
  const workers = (Object.keys(ROLES) as Role[]).filter((role) => role !== "api" && isRoleEnabled(role));
  if (config.workers.processes === "per-role") return workers.map((role) => [role]);
  return workers.length > 0 ? [workers] : [];
}

interface Child {
  /** What it runs: one role, or the worker roles together; restarted as a unit. */
  roles: Role[];
  args: string[];
  process: Subprocess;
  startedAt: number;
  delay: number;
}

/**
 * The supervisor on PostgreSQL (`src/index.ts` with DATABASE_URL): the database prepared by a short child
 * (`--prepare`: migrations, sealing, the first account, once the database answers), then `API_PROCESSES`
 * API processes and the worker roles' processes, each restarted when it dies, all drained on SIGTERM. It
 * loads neither the database's nor Redis's clients: an idle supervisor is little more than Bun and its log.
 */
export async function superviseChildren(): Promise<void> {
  const children = new Set<Child>();
  let preparing: Subprocess | undefined;
  let stopping = false;
  const entry = new URL("../index.ts", import.meta.url).pathname;

  // Installed first: a signal while the database is prepared ends that, and nothing starts.
  // Children are killed at grace + margin; the supervisor's own limit lies beyond that.
  onStopSignal(
    async () => {
      stopping = true;
      preparing?.kill("SIGTERM");
      const all = [...children];
      for (const child of all) child.process.kill("SIGTERM");
      const killAfter = setTimeout(() => {
        for (const child of all) child.process.kill("SIGKILL");
      }, config.http.shutdownGraceMs + STOP_MARGIN_MS);
      await Promise.all([preparing?.exited, ...all.map((child) => child.process.exited)]);
      clearTimeout(killAfter);
    },
    config.http.shutdownGraceMs + 2 * STOP_MARGIN_MS,
  );

  preparing = spawn([process.execPath, entry, PREPARE_FLAG, `${SUPERVISOR_FLAG}=${process.pid}`], {
    stdio: ["ignore", "inherit", "inherit"],
    env: process.env,
  });
  const prepared = await preparing.exited;
  preparing = undefined;
  if (stopping) return;
  // It said why (a sealing key that does not open what is sealed): nothing is started.
  if (prepared !== 0) process.exit(prepared || 1);

  const start = (roles: Role[], delay = RESTART_DELAY_MIN_MS, args: string[] = []) => {
    const role = roles.join(",");
    const child: Child = {
      roles,
      args,
      delay,
      startedAt: Date.now(),
      process: spawn([process.execPath, entry, ...args, `${SUPERVISOR_FLAG}=${process.pid}`, `--role=${role}`], {
        stdio: ["ignore", "inherit", "inherit"],
        env: process.env,
      }),
    };
    children.add(child);
    child.process.exited.then((code) => {
      children.delete(child);
      if (stopping) return;
      if (code === CANNOT_LISTEN_EXIT_CODE) {
        // The child said which listener and why; the others are stopped and the supervisor exits 1.
        process.exitCode = 1;
        process.kill(process.pid, "SIGTERM");
        return;
      }
      const nextDelay =
        Date.now() - child.startedAt > HEALTHY_AFTER_MS
          ? RESTART_DELAY_MIN_MS
          : Math.min(child.delay * 2, RESTART_DELAY_MAX_MS);
      log.warn({ role, pid: child.process.pid, code, restartInMs: child.delay }, "child exited; restarting");
      setTimeout(() => start(roles, nextDelay, child.args), child.delay);
    });
  };

  // The first API process also serves the local operator's socket; a restart keeps it so.
  for (let i = 0; i < config.http.processes; i++)
    start(["api"], RESTART_DELAY_MIN_MS, i === 0 ? [LOCAL_SOCKET_FLAG] : []);
  for (const roles of workerProcesses()) start(roles);

  await announce();
}

/** How long a supervisor waits for its API pool to answer before it gives up announcing it. */
const ANNOUNCE_WITHIN_MS = 60_000;

/** Whether the pool answers on PORT, asked on loopback when it listens on every address. */
async function poolAnswers(): Promise<boolean> {
  const host = ["0.0.0.0", "::", ""].includes(config.http.host) ? "127.0.0.1" : config.http.host;
  const url = `http://${host.includes(":") ? `[${host}]` : host}:${config.http.port}/healthz`;
  return fetch(url, { signal: AbortSignal.timeout(1_000) }).then(
    (response) => response.ok,
    () => false,
  );
}

/**
 * Where a person goes next, once the API answers: a banner when stdout is a terminal, one
 * log line with the same addresses otherwise.
 */
export async function announce(): Promise<void> {
  const deadline = Date.now() + ANNOUNCE_WITHIN_MS;
  while (!(await poolAnswers())) {
    if (Date.now() > deadline) return;
    await Bun.sleep(200);
  }
  const base = config.http.publicUrl.replace(/\/+$/, "");
  const keyFile = join(config.database.dataDir, "first-api-key");
  const firstApiKey = existsSync(keyFile)
    ? relative(process.cwd(), keyFile).startsWith("..")
      ? keyFile
      : relative(process.cwd(), keyFile)
    : undefined;
  const metrics =
    config.metrics.port === 0 ? undefined : `http://${config.metrics.host}:${config.metrics.port}/metrics`;
  const where = { api: base, console: `${base}/console`, swagger: `${base}/swagger`, firstApiKey, metrics };
  if (!readableLogs) {
    log.info(where, "parley ready");
    return;
  }
  const lines = [
    "",
    "  Parley is ready",
    `  API          ${where.api}`,
    `  Console      ${where.console}`,
    `  API docs     ${where.swagger}`,
    ...(firstApiKey ? [`  First API key in ${firstApiKey}`] : []),
    ...(metrics ? [`  Metrics      ${metrics}`] : []),
    "",
  ];
  process.stdout.write(`${lines.join("\n")}\n`);
}
