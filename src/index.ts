/**
 * Parley's entry point. With no --role it is the supervisor: it applies migrations,
 * starts API_PROCESSES API processes on one port (reusePort) and one of every other
 * role, restarts a child that dies, and on SIGTERM/SIGINT drains them all and exits 0.
 * On the embedded database (no DATABASE_URL) every role runs inside this one process,
 * since PGlite cannot be shared between processes. A second Parley on a port one already
 * serves is refused before it opens anything (src/port-guard.ts).
 */
import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { connect } from "node:net";
import { join, resolve } from "node:path";
import { config, loadProcessConfig } from "./config";
import { keepNewFilesPrivate, makePrivate } from "./core/private-dir";
import { portHeldBy } from "./port-guard";
import { SUPERVISOR_FLAG } from "./roles";

keepNewFilesPrivate();

const role = process.argv.find((arg) => arg.startsWith("--role="))?.slice("--role=".length);
/**
 * Whose death stops this role's process: the supervisor that names itself, else the parent. Read from the
 * arguments because a parent read here may already be init: the imports above run first, and a supervisor
 * killed while they load would go unnoticed for good.
 */
const parentPid =
  Number(process.argv.find((arg) => arg.startsWith(`${SUPERVISOR_FLAG}=`))?.slice(SUPERVISOR_FLAG.length + 1)) ||
  process.ppid;

function redisAnswers(where: { port: number; host: string } | { path: string }): Promise<boolean> {
  return new Promise((done) => {
    const socket = connect({ ...where, timeout: 1_000 }, () => socket.end(() => done(true)));
    socket.on("error", () => done(false));
    socket.on("timeout", () => {
      socket.destroy();
      done(false);
    });
  });
}

/** How long the private redis-server has to save and exit once Parley has stopped, before it is killed. */
const REDIS_STOP_MS = 5_000;

/**
 * With no REDIS_URL or REDIS_SENTINELS and nothing on the default port, run a private redis-server for this
 * service. It listens on a Unix socket in DATA_DIR and on no TCP port, so only Parley's user reaches it. It
 * runs in a session of its own: Ctrl-C in a terminal signals the whole foreground process group, and Redis
 * must outlive Parley's drain, which stops it last. True when REDIS_URL now names it.
 */
async function ensureRedis(): Promise<boolean> {
  if (config.redis.explicit || (await redisAnswers({ port: 6379, host: "127.0.0.1" }))) return false;
  const dir = resolve(config.database.dataDir, "redis");
  const path = join(dir, "redis.sock");
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  // One left running by a Parley killed outright is used again.
  if (!(await redisAnswers({ path }))) {
    const child = spawn(
      "redis-server",
      [
        ...["--port", "0", "--unixsocket", path, "--unixsocketperm", "700"],
        ...["--dir", dir, "--save", "60 1", "--appendonly", "no"],
      ],
      { stdio: "ignore", detached: true },
    );
    child.on("error", (error) => {
      console.error(`parley: no Redis reachable and redis-server could not start: ${error.message}`);
      process.exit(1);
    });
    const exited = new Promise<void>((done) => child.once("exit", () => done()));
    const { whenStopped } = await import("./core/lifecycle");
    whenStopped(async () => {
      child.kill("SIGTERM");
      const killer = setTimeout(() => child.kill("SIGKILL"), REDIS_STOP_MS);
      await exited;
      clearTimeout(killer);
    });
    // Any other way out (a failed start, a stop that ran out of time) takes it along too.
    process.on("exit", () => child.kill("SIGTERM"));
    for (let i = 0; i < 50 && !(await redisAnswers({ path })); i++) await Bun.sleep(100);
  }
  process.env.REDIS_URL = path;
  return true;
}

if (!loadProcessConfig()) process.exit(2);
if (!role) {
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
  if (await ensureRedis()) loadProcessConfig();
  // Before the database is opened: a second Parley on the port must not join the first one's pool.
  const held = await portHeldBy(config.http.host, config.http.port);
  if (held) {
    console.error(`parley: ${held}`);
    process.exit(1);
  }
}
if (role) {
  await import("./supervisor").then(({ runRole }) => runRole(role, parentPid));
} else {
  await import("./supervisor").then(({ supervise }) => supervise());
}
