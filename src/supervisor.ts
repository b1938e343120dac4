import { existsSync } from "node:fs";
import { join, relative } from "node:path";
import { type Subprocess, spawn } from "bun";
import { config } from "./core/config";
import { closeShared } from "./connections";
import { AppError, dependencyFailure } from "./core/errors";
import { guardAgainstStrayErrors, onStopSignal, type Running, runUntilStopped, STOP_MARGIN_MS } from "./core/lifecycle";
import { log, readableLogs } from "./core/log";
import { database } from "./db/client";
import { migrate } from "./db/migrate";
import { promptRedis, settledWithin, withinRedis } from "./queue/connection";
import { isRole, isRoleEnabled, ROLES, type Role, SUPERVISOR_FLAG } from "./roles";
import { LOCAL_SOCKET_FLAG } from "./modules/admin/local";
import { cannotListen, isBindFailure } from "./port-guard";

const RESTART_DELAY_MIN_MS = 500;
const RESTART_DELAY_MAX_MS = 30_000;
/** A child that lived this long is considered healthy again, and its restart delay resets. */
const HEALTHY_AFTER_MS = 30_000;

/** A role's exit when a listener cannot bind: restarting it would fail the same way, so the supervisor stops. */
const CANNOT_LISTEN_EXIT_CODE = 78;

/** A child process: runs one role until SIGTERM, or until its supervisor (parentPid) is gone. */
export async function runRole(name: string, parentPid?: number): Promise<void> {
  if (!isRole(name)) {
    console.error(`parley: unknown role "${name}"; roles are ${Object.keys(ROLES).join(", ")}`);
    process.exit(2);
  }
  guardAgainstStrayErrors();
  if (!isRoleEnabled(name)) {
    log.info({ role: name }, "role disabled by configuration; nothing to run");
    await closeShared();
    return;
  }
  let running: Running;
  try {
    running = await ROLES[name]();
  } catch (error) {
    if (!isBindFailure(error)) throw error;
    console.error(cannotListen(config, error));
    await closeShared();
    process.exit(CANNOT_LISTEN_EXIT_CODE);
  }
  runUntilStopped(running, closeShared, parentPid);
}

async function superviseInProcess(): Promise<void> {
  guardAgainstStrayErrors();
  const running: Running[] = [];
  // The role being started: settled once it has joined `running`, or failed to start.
  let starting: Promise<void> = Promise.resolve();
  let stopping = false;
  const stopAll = async () => {
    stopping = true;
    // A role still starting when the signal came is stopped with the others, and no other starts:
    // one that came up after the database and Redis closed ran against them closed, and warned.
    // Only while Redis answers: a start may be waiting for a Redis out of reach, and a stop never waits on it.
    const redisAnswers = await withinRedis(promptRedis(), "stopping", () => promptRedis().ping()).then(
      () => true,
      () => false,
    );
    if (redisAnswers) await settledWithin(starting, STOP_MARGIN_MS);
    await Promise.all(running.map((role) => role.stop()));
    await closeShared();
  };
  // Installed first: a signal during a slow role start must still drain what already runs.
  onStopSignal(stopAll);
  try {
    for (const name of Object.keys(ROLES) as Role[]) {
      if (stopping) break;
      if (!isRoleEnabled(name)) continue;
      const started = ROLES[name]().then((role) => {
        running.push(role);
      });
      starting = started;
      await started;
    }
  } catch (error) {
    if (!isBindFailure(error)) throw error;
    // What started is stopped and the database closed, so no socket, pid file or lock is left behind.
    console.error(cannotListen(config, error));
    await stopAll();
    process.exit(1);
  }
}

interface Child {
  role: Role;
  args: string[];
  process: Subprocess;
  startedAt: number;
  delay: number;
}

async function superviseChildren(): Promise<void> {
  const children = new Set<Child>();
  let stopping = false;
  const entry = new URL("./index.ts", import.meta.url).pathname;

  const start = (role: Role, delay = RESTART_DELAY_MIN_MS, args: string[] = []) => {
    const child: Child = {
      role,
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
      setTimeout(() => start(role, nextDelay, child.args), child.delay);
    });
  };

  // The first API process also serves the local operator's socket; a restart keeps it so.
  for (let i = 0; i < config.http.processes; i++)
    start("api", RESTART_DELAY_MIN_MS, i === 0 ? [LOCAL_SOCKET_FLAG] : []);
  for (const role of Object.keys(ROLES) as Role[]) if (role !== "api" && isRoleEnabled(role)) start(role);

  // Children are killed at grace + margin; the supervisor's own limit lies beyond that.
  onStopSignal(
    async () => {
      stopping = true;
      const all = [...children];
      for (const child of all) child.process.kill("SIGTERM");
      const killAfter = setTimeout(() => {
        for (const child of all) child.process.kill("SIGKILL");
      }, config.http.shutdownGraceMs + STOP_MARGIN_MS);
      await Promise.all(all.map((child) => child.process.exited));
      clearTimeout(killAfter);
      await closeShared();
    },
    config.http.shutdownGraceMs + 2 * STOP_MARGIN_MS,
  );
}

/** How often a supervisor started before its database tries again. */
const DATABASE_WAIT_MS = 1_000;

/**
 * Migrations and the first account, once the database answers: a supervisor started while
 * PostgreSQL is still starting (or down) waits for it instead of exiting.
 */
async function prepareDatabase(): Promise<void> {
  // Loaded here, and only when a first account may be made: every role's child process imports
  // this module too, and the accounts service brings the JWT library and more along.
  const bootstrap = config.admin.bootstrapAccount ? await import("./modules/accounts/bootstrap") : undefined;
  const { sealSecretsAtRest } = await import("./sealed-at-rest");
  for (let attempt = 1; ; attempt++) {
    try {
      await migrate();
      await sealSecretsAtRest();
      await bootstrap?.ensureFirstAccount();
      return;
    } catch (error) {
      // The sealing key does not open what is sealed: no wait mends that.
      if (error instanceof AppError) {
        console.error(`parley: ${error.message}`);
        process.exit(1);
      }
      const failure = dependencyFailure(error);
      if (!failure) throw error;
      if (attempt === 1 || attempt % 30 === 0) {
        const address = databaseAddress();
        log.warn(
          { setting: "DATABASE_URL", address, err: failure, attempt },
          `waiting for the database at DATABASE_URL ${address} (${failure}); trying every second. ` +
            "Nothing is served until it answers: migrations run first, then the API listens",
        );
      }
      await Bun.sleep(DATABASE_WAIT_MS);
    }
  }
}

/** DATABASE_URL without its credentials: the hosts and the database name. */
function databaseAddress(): string {
  return (config.database.url ?? "").replace(/\/\/[^@/]*@/, "//").replace(/\?.*$/, "");
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
async function announce(): Promise<void> {
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

export async function supervise(): Promise<void> {
  await prepareDatabase();
  if (database.kind === "pglite") {
    log.info({ dataDir: config.database.dataDir }, "embedded database: running every role in this process");
    // Announced once the API answers, while the other roles start: a role waiting for an unreachable
    // Redis (the recorder's queue) must not hide that the API serves (the Redis warning says what waits).
    await Promise.all([superviseInProcess(), announce()]);
  } else {
    await superviseChildren();
    await announce();
  }
}
