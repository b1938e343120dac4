import { existsSync } from "node:fs";
import { join, relative } from "node:path";
import { type Subprocess, spawn } from "bun";
import { config } from "../core/config";
import { AppError, dependencyFailure } from "../core/errors";
import {
  guardAgainstStrayErrors,
  onStopSignal,
  type Running,
  runUntilStopped,
  STOP_MARGIN_MS,
} from "../core/lifecycle";
import { log, readableLogs } from "../core/log";
import { migrate } from "../db/migrate";
import { promptRedis, settledWithin, withinRedis } from "../queue/connection";
import { isRole, isRoleEnabled, ROLES, type Role, SUPERVISOR_FLAG } from "./roles";
import { LOCAL_SOCKET_FLAG } from "../modules/admin/local";
import { cannotListen, isBindFailure } from "./port-guard";
import { buildProcess, type ProcessServices } from "./root";

const RESTART_DELAY_MIN_MS = 500;
const RESTART_DELAY_MAX_MS = 30_000;
/** A child that lived this long is considered healthy again, and its restart delay resets. */
const HEALTHY_AFTER_MS = 30_000;

/** A role's exit when a listener cannot bind: restarting it would fail the same way, so the supervisor stops. */
const CANNOT_LISTEN_EXIT_CODE = 78;

/**
 * A child process: runs one role, or several worker roles together (`recorder,sip,cdr,webhooks`), until
 * SIGTERM, or until its supervisor (parentPid) is gone. A process started alone (on another machine, with no
 * supervisor of its own: `--role=sip` for a gateway there) applies the migrations first, as a supervisor does
 * before it starts its roles.
 */
export async function runRole(names: string, parentPid?: number, options: { alone?: boolean } = {}): Promise<void> {
  const roles = names.split(",");
  const unknown = roles.filter((name) => !isRole(name));
  if (unknown.length > 0) {
    console.error(`parley: unknown role "${unknown.join(", ")}"; roles are ${Object.keys(ROLES).join(", ")}`);
    process.exit(2);
  }
  // The API's processes share its port (API_PROCESSES of them): it runs in processes of its own.
  if (roles.length > 1 && (roles.includes("api") || new Set(roles).size < roles.length)) {
    console.error(`parley: --role=${names}: roles run together are worker roles, each named once; api runs alone`);
    process.exit(2);
  }
  guardAgainstStrayErrors();
  const services = await buildProcess(names);
  if (options.alone) await migrate();
  const enabled = (roles as Role[]).filter(isRoleEnabled);
  for (const role of roles) if (!enabled.includes(role as Role)) log.info({ role }, "role disabled by configuration");
  if (enabled.length === 0) {
    log.info({ role: names }, "nothing to run");
    await services.stop();
    return;
  }
  // Before the roles start: a signal during a slow start (one waiting for Redis) still drains what runs.
  runUntilStopped(services, parentPid);
  try {
    await startRoles(services, enabled);
  } catch (error) {
    if (!isBindFailure(error)) throw error;
    console.error(cannotListen(config, error));
    await services.stop();
    process.exit(CANNOT_LISTEN_EXIT_CODE);
  }
}

/**
 * Starts the roles on the process's services, one after another, and pushes their stop before the first
 * starts. The roles drain side by side, each within the grace period, before what they stand on stops:
 * the one grace bounds them all. A stop that comes while a role still starts lets it finish, starts no
 * other, and stops it with the rest: one that came up after the database and Redis closed ran against
 * them closed, and warned.
 */
async function startRoles(services: ProcessServices, roles: Role[]): Promise<void> {
  const running: Running[] = [];
  // The role being started: settled once it has joined `running`, or failed to start.
  let starting: Promise<void> = Promise.resolve();
  let stopping = false;
  services.stoppers.push("roles", async () => {
    stopping = true;
    // Only while Redis answers: a start may be waiting for a Redis out of reach, and a stop never waits on it.
    const redisAnswers = await withinRedis(promptRedis(), "stopping", () => promptRedis().ping()).then(
      () => true,
      () => false,
    );
    if (redisAnswers) await settledWithin(starting, STOP_MARGIN_MS);
    await Promise.all(running.map((role) => role.stop()));
  });
  for (const name of roles) {
    if (stopping) break;
    const started = ROLES[name](services).then((role) => {
      running.push(role);
    });
    starting = started;
    await started;
  }
}

async function superviseInProcess(services: ProcessServices): Promise<void> {
  guardAgainstStrayErrors();
  // Installed first: a signal during a slow role start must still drain what already runs.
  onStopSignal(services.stop);
  try {
    await startRoles(services, (Object.keys(ROLES) as Role[]).filter(isRoleEnabled));
  } catch (error) {
    if (!isBindFailure(error)) throw error;
    // What started is stopped and the database closed, so no socket, pid file or lock is left behind.
    console.error(cannotListen(config, error));
    await services.stop();
    process.exit(1);
  }
}

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

async function superviseChildren(services: ProcessServices): Promise<void> {
  const children = new Set<Child>();
  let stopping = false;
  const entry = new URL("../index.ts", import.meta.url).pathname;

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

  // Children are killed at grace + margin; the supervisor's own limit lies beyond that.
  services.stoppers.push("children", async () => {
    stopping = true;
    const all = [...children];
    for (const child of all) child.process.kill("SIGTERM");
    const killAfter = setTimeout(() => {
      for (const child of all) child.process.kill("SIGKILL");
    }, config.http.shutdownGraceMs + STOP_MARGIN_MS);
    await Promise.all(all.map((child) => child.process.exited));
    clearTimeout(killAfter);
  });
  onStopSignal(services.stop, config.http.shutdownGraceMs + 2 * STOP_MARGIN_MS);
}

/** How often a supervisor started before its database tries again. */
const DATABASE_WAIT_MS = 1_000;

/**
 * Migrations and the first account, once the database answers: a supervisor started while
 * PostgreSQL is still starting (or down) waits for it instead of exiting.
 */
async function prepareDatabase({ database }: ProcessServices): Promise<void> {
  // Loaded here, and only when a first account may be made: every role's child process imports
  // this module too, and the accounts service brings the JWT library and more along.
  const bootstrap = config.admin.bootstrapAccount ? await import("../modules/accounts/bootstrap") : undefined;
  const { sealSecretsAtRest } = await import("./sealed-at-rest");
  for (let attempt = 1; ; attempt++) {
    try {
      await migrate();
      await sealSecretsAtRest(database);
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
  const services = await buildProcess("supervisor");
  await prepareDatabase(services);
  if (services.alone) {
    log.info({ dataDir: config.database.dataDir }, "embedded database: running every role in this process");
    // Announced once the API answers, while the other roles start: a role waiting for an unreachable
    // Redis (the recorder's queue) must not hide that the API serves (the Redis warning says what waits).
    await Promise.all([superviseInProcess(services), announce()]);
  } else {
    await superviseChildren(services);
    await announce();
  }
}
