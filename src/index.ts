/**
 * Parley's entry point. With no --role it is the supervisor: it applies migrations,
 * starts API_PROCESSES API processes on one port (reusePort) and one of every other
 * role, restarts a child that dies, and on SIGTERM/SIGINT drains them all and exits 0.
 * On the embedded database (no DATABASE_URL) every role runs inside this one process,
 * since PGlite cannot be shared between processes. A Parley whose ports are taken (a second
 * one on the same settings) is refused before it starts or opens anything (src/port-guard.ts).
 */
import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { connect } from "node:net";
import { resolve } from "node:path";
import { loadConfig, loadProcessConfig } from "./config";
import { listenersRefusal } from "./port-guard";
import { SUPERVISOR_FLAG } from "./roles";

const role = process.argv.find((arg) => arg.startsWith("--role="))?.slice("--role=".length);
/**
 * Whose death stops this role's process: the supervisor that names itself, else the parent. Read from the
 * arguments because a parent read here may already be init: the imports above run first, and a supervisor
 * killed while they load would go unnoticed for good.
 */
const parentPid =
  Number(process.argv.find((arg) => arg.startsWith(`${SUPERVISOR_FLAG}=`))?.slice(SUPERVISOR_FLAG.length + 1)) ||
  process.ppid;

function redisAnswers(port: number, host: string): Promise<boolean> {
  return new Promise((done) => {
    const socket = connect({ port, host, timeout: 1_000 }, () => socket.end(() => done(true)));
    socket.on("error", () => done(false));
    socket.on("timeout", () => {
      socket.destroy();
      done(false);
    });
  });
}

/**
 * With no REDIS_URL or REDIS_SENTINELS and nothing on the default port, run a private redis-server for this service.
 */
async function ensureRedis(): Promise<void> {
  if (process.env.REDIS_URL || process.env.REDIS_SENTINELS || (await redisAnswers(6379, "127.0.0.1"))) return;
  const port = 6390;
  const dir = resolve(process.env.DATA_DIR ?? "./data", "redis");
  mkdirSync(dir, { recursive: true });
  if (!(await redisAnswers(port, "127.0.0.1"))) {
    const child = spawn(
      "redis-server",
      ["--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "60 1", "--appendonly", "no"],
      {
        stdio: "ignore",
      },
    );
    child.on("error", (error) => {
      console.error(`parley: no Redis reachable and redis-server could not start: ${error.message}`);
      process.exit(1);
    });
    process.on("exit", () => child.kill("SIGTERM"));
    for (let i = 0; i < 50 && !(await redisAnswers(port, "127.0.0.1")); i++) await Bun.sleep(100);
  }
  process.env.REDIS_URL = `redis://127.0.0.1:${port}`;
}

if (!role) {
  // Before a private Redis starts or the database opens: a second Parley on the port must not join the first
  // one's pool, nor leave anything behind. Settings that do not parse are reported by loadProcessConfig below.
  const refused = await (async () => listenersRefusal(loadConfig(process.env)))().catch(() => undefined);
  if (refused) {
    console.error(refused);
    process.exit(1);
  }
}
// A private Redis, when one starts, is part of the environment the settings are parsed from.
if (!role) await ensureRedis();
if (!loadProcessConfig()) process.exit(2);
if (role) {
  await import("./supervisor").then(({ runRole }) => runRole(role, parentPid));
} else {
  await import("./supervisor").then(({ supervise }) => supervise());
}
