import { type Subprocess, spawn } from "bun";
import { config } from "./config";
import { database } from "./db/client";
import { migrate } from "./db/migrate";
import { log } from "./http/log";
import { ensureFirstAccount } from "./modules/accounts/bootstrap";
import { closeRedis } from "./queue/connection";
import { closeQueues } from "./queue/queues";
import { isRole, ROLES, type Role } from "./roles";
import type { Running } from "./server";

const RESTART_DELAY_MIN_MS = 500;
const RESTART_DELAY_MAX_MS = 30_000;
/** A child that lived this long is considered healthy again, and its restart delay resets. */
const HEALTHY_AFTER_MS = 30_000;
const ORPHAN_CHECK_MS = 1_000;

async function closeShared(): Promise<void> {
  await closeQueues();
  await closeRedis();
  await database.close();
}

function onStopSignal(stop: () => Promise<void>): void {
  let stopping = false;
  const handler = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, "stopping");
    stop().then(
      () => process.exit(0),
      (error: Error) => {
        log.error({ err: error.message }, "stop failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", handler);
  process.on("SIGINT", handler);
}

/** A child process: runs one role until SIGTERM, or until its supervisor (parentPid) is gone. */
export async function runRole(name: string, parentPid?: number): Promise<void> {
  if (!isRole(name)) {
    console.error(`parley: unknown role "${name}"; roles are ${Object.keys(ROLES).join(", ")}`);
    process.exit(2);
  }
  const running = await ROLES[name]();
  const stop = async () => {
    await running.stop();
    await closeShared();
  };
  onStopSignal(stop);
  // A supervisor killed outright cannot forward SIGTERM; a child whose parent is gone stops itself.
  if (parentPid !== undefined) {
    setInterval(() => {
      if (process.ppid !== parentPid) process.kill(process.pid, "SIGTERM");
    }, ORPHAN_CHECK_MS).unref();
  }
}

async function superviseInProcess(): Promise<void> {
  const running: Running[] = [];
  // Installed first: a signal during a slow role start must still drain what already runs.
  onStopSignal(async () => {
    await Promise.all(running.map((role) => role.stop()));
    await closeShared();
  });
  for (const name of Object.keys(ROLES) as Role[]) running.push(await ROLES[name]());
}

interface Child {
  role: Role;
  process: Subprocess;
  startedAt: number;
  delay: number;
}

async function superviseChildren(): Promise<void> {
  const children = new Set<Child>();
  let stopping = false;
  const entry = new URL("./index.ts", import.meta.url).pathname;

  const start = (role: Role, delay = RESTART_DELAY_MIN_MS) => {
    const child: Child = {
      role,
      delay,
      startedAt: Date.now(),
      process: spawn([process.execPath, entry, `--role=${role}`], { stdio: ["ignore", "inherit", "inherit"], env: process.env }),
    };
    children.add(child);
    child.process.exited.then((code) => {
      children.delete(child);
      if (stopping) return;
      const nextDelay = Date.now() - child.startedAt > HEALTHY_AFTER_MS ? RESTART_DELAY_MIN_MS : Math.min(child.delay * 2, RESTART_DELAY_MAX_MS);
      log.warn({ role, pid: child.process.pid, code, restartInMs: child.delay }, "child exited; restarting");
      setTimeout(() => start(role, nextDelay), child.delay);
    });
  };

  for (let i = 0; i < config.http.processes; i++) start("api");
  for (const role of Object.keys(ROLES) as Role[]) if (role !== "api") start(role);

  onStopSignal(async () => {
    stopping = true;
    const all = [...children];
    for (const child of all) child.process.kill("SIGTERM");
    const killAfter = setTimeout(() => {
      for (const child of all) child.process.kill("SIGKILL");
    }, config.http.shutdownGraceMs + 5_000);
    await Promise.all(all.map((child) => child.process.exited));
    clearTimeout(killAfter);
    await closeShared();
  });
}

export async function supervise(): Promise<void> {
  await migrate();
  await ensureFirstAccount();
  if (database.kind === "pglite") {
    log.info({ dataDir: config.database.dataDir }, "embedded database: running every role in this process");
    await superviseInProcess();
  } else {
    await superviseChildren();
  }
}
