/**
 * Parley's entry point. With no --role it is the supervisor: it applies migrations,
 * starts API_PROCESSES API processes on one port (reusePort) and one process of the worker
 * roles (or one of each: WORKER_PROCESSES=per-role), restarts a child that dies, and on
 * SIGTERM/SIGINT drains them all and exits 0; it prepares the database (migrations, the first account)
 * first, in a short child process (--prepare). `--role=<name>[,<name>…]` runs roles in this process.
 * On the embedded database (no DATABASE_URL) every role runs inside this one process,
 * since PGlite cannot be shared between processes. A Parley whose ports are taken (a second
 * one on the same settings) is refused before it starts or opens anything (src/process/port-guard.ts).
 */
import { config, loadProcessConfig } from "./core/config";
import { keepNewFilesPrivate, makePrivate } from "./core/private-dir";
import { listenersRefusal } from "./process/port-guard";
import { joinPrivateRedis, startPrivateRedis } from "./process/private-redis";
import { PREPARE_FLAG, SUPERVISOR_FLAG } from "./process/roles";

keepNewFilesPrivate();

const role = process.argv.find((arg) => arg.startsWith("--role="))?.slice("--role=".length);
/**
 * Whose death stops this role's process: the supervisor that names itself, else the parent. Read from the
 * arguments because a parent read here may already be init: the imports above run first, and a supervisor
 * killed while they load would go unnoticed for good.
 */
const supervisorPid = Number(
  process.argv.find((arg) => arg.startsWith(`${SUPERVISOR_FLAG}=`))?.slice(SUPERVISOR_FLAG.length + 1),
);
const parentPid = supervisorPid || process.ppid;

if (!loadProcessConfig()) process.exit(2);
if (process.argv.includes(PREPARE_FLAG)) {
  // A supervisor's preparation of the database, which may wait for it: it ends when its supervisor is gone.
  setInterval(() => {
    if (process.ppid !== parentPid) process.exit(1);
  }, 1_000).unref();
  await import("./process/supervisor").then(({ prepare }) => prepare());
  process.exit(0);
}
if (!role) {
  // Before a private Redis starts or the database opens: a second Parley on the ports must not join the first
  // one's pool, nor leave anything behind.
  const refused = await listenersRefusal(config).catch(() => undefined);
  if (refused) {
    console.error(refused);
    process.exit(1);
  }
  // Before anything is written there: a folder an older Parley (or a copy) left readable is closed first.
  const { changed, notOurs } = makePrivate(config.database.dataDir);
  if (changed > 0 || notOurs.length > 0) {
    const { log } = await import("./core/log");
    const dataDir = config.database.dataDir;
    if (changed > 0) log.info({ dataDir, entries: changed }, "made the data folder private to this user");
    if (notOurs.length > 0) {
      const first = notOurs.slice(0, 5);
      log.warn({ dataDir, entries: notOurs.length, first }, "entries of the data folder this user cannot make private");
    }
  }
  // A private Redis, when one starts, is part of the environment the settings are parsed from.
  if (await startPrivateRedis()) loadProcessConfig();
}
if (role) {
  // A role started alone on this machine, with no Redis named, joins the supervisor's private one.
  if (await joinPrivateRedis()) loadProcessConfig();
  await import("./process/supervisor").then(({ runRole }) => runRole(role, parentPid, { alone: !supervisorPid }));
} else if (config.database.url) {
  await import("./process/children").then(({ superviseChildren }) => superviseChildren());
} else {
  await import("./process/supervisor").then(({ supervise }) => supervise());
}
