import { type Subprocess, spawn } from "bun";
import { config } from "./config";
import { closeShared } from "./connections";
import { dependencyFailure } from "./core/errors";
import { guardAgainstStrayErrors, onStopSignal, type Running, runUntilStopped, STOP_MARGIN_MS } from "./core/lifecycle";
import { log } from "./core/log";
import { database } from "./db/client";
import { migrate } from "./db/migrate";
import { ensureFirstAccount } from "./modules/accounts/bootstrap";
import { isRole, isRoleEnabled, ROLES, type Role } from "./roles";
import { LOCAL_SOCKET_FLAG } from "./modules/admin/local";

const RESTART_DELAY_MIN_MS = 500;
const RESTART_DELAY_MAX_MS = 30_000;
/** A child that lived this long is considered healthy again, and its restart delay resets. */
const HEALTHY_AFTER_MS = 30_000;

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
  runUntilStopped(await ROLES[name](), closeShared, parentPid);
}

async function superviseInProcess(): Promise<void> {
  guardAgainstStrayErrors();
  const running: Running[] = [];
  // Installed first: a signal during a slow role start must still drain what already runs.
  onStopSignal(async () => {
    await Promise.all(running.map((role) => role.stop()));
    await closeShared();
  });
  for (const name of Object.keys(ROLES) as Role[]) if (isRoleEnabled(name)) running.push(await ROLES[name]());
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
      process: spawn([process.execPath, entry, ...args, `--role=${role}`], { stdio: ["ignore", "inherit", "inherit"], env: process.env }),
    };
    children.add(child);
    child.process.exited.then((code) => {
      children.delete(child);
      if (stopping) return;
      const nextDelay = Date.now() - child.startedAt > HEALTHY_AFTER_MS ? RESTART_DELAY_MIN_MS : Math.min(child.delay * 2, RESTART_DELAY_MAX_MS);
      log.warn({ role, pid: child.process.pid, code, restartInMs: child.delay }, "child exited; restarting");
      setTimeout(() => start(role, nextDelay, child.args), child.delay);
    });
  };

  // The first API process also serves the local operator's socket; a restart keeps it so.
  for (let i = 0; i < config.http.processes; i++) start("api", RESTART_DELAY_MIN_MS, i === 0 ? [LOCAL_SOCKET_FLAG] : []);
  for (const role of Object.keys(ROLES) as Role[]) if (role !== "api" && isRoleEnabled(role)) start(role);

  // Children are killed at grace + margin; the supervisor's own limit lies beyond that.
  onStopSignal(async () => {
    stopping = true;
    const all = [...children];
    for (const child of all) child.process.kill("SIGTERM");
    const killAfter = setTimeout(() => {
      for (const child of all) child.process.kill("SIGKILL");
    }, config.http.shutdownGraceMs + STOP_MARGIN_MS);
    await Promise.all(all.map((child) => child.process.exited));
    clearTimeout(killAfter);
    await closeShared();
  }, config.http.shutdownGraceMs + 2 * STOP_MARGIN_MS);
}

/** How often a supervisor started before its database tries again. */
const DATABASE_WAIT_MS = 1_000;

/**
 * Migrations and the first account, once the database answers: a supervisor started while
 * PostgreSQL is still starting (or down) waits for it instead of exiting.
 */
async function prepareDatabase(): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await migrate();
      await ensureFirstAccount();
      return;
    } catch (error) {
      const failure = dependencyFailure(error);
      if (!failure) throw error;
      if (attempt === 1 || attempt % 30 === 0) log.warn({ err: failure, attempt }, "waiting for the database");
      await Bun.sleep(DATABASE_WAIT_MS);
    }
  }
}

export async function supervise(): Promise<void> {
  await prepareDatabase();
  if (database.kind === "pglite") {
    log.info({ dataDir: config.database.dataDir }, "embedded database: running every role in this process");
    await superviseInProcess();
  } else {
    await superviseChildren();
  }
}
