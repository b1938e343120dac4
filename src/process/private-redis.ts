/**
 * The private redis-server `npm start` runs when no Redis is named and none answers on the default
 * port, and how the command line finds it. It listens on a Unix socket in DATA_DIR and on no TCP
 * port, so only Parley's user (and root) reach its queues, LL-HLS parts, counters and gateway list.
 */
import { spawn } from "node:child_process";
import { mkdirSync } from "node:fs";
import { connect } from "node:net";
import { dirname, join } from "node:path";
import { config } from "../core/config";

/** Where the private redis-server listens. */
export const privateRedisSocket = () => join(config.database.dataDir, "redis", "redis.sock");

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

/** Linux's sun_path holds 108 bytes, the terminating zero included: a longer path cannot be bound. */
const LONGEST_SOCKET_PATH = 107;

/** How long the private redis-server has to save and exit once Parley has stopped, before it is killed. */
const REDIS_STOP_MS = 5_000;

/**
 * With no REDIS_URL or REDIS_SENTINELS and nothing on the default port, run a private redis-server for this
 * service. It listens on a Unix socket in DATA_DIR and on no TCP port, so only Parley's user reaches it. It
 * runs in a session of its own: Ctrl-C in a terminal signals the whole foreground process group, and Redis
 * must outlive Parley's drain, which stops it last. True when REDIS_URL now names it.
 */
export async function startPrivateRedis(): Promise<boolean> {
  if (config.redis.explicit || (await redisAnswers({ port: 6379, host: "127.0.0.1" }))) return false;
  const path = privateRedisSocket();
  if (Buffer.byteLength(path) > LONGEST_SOCKET_PATH) {
    console.error(
      `parley: the private Redis's socket path ${path} is longer than a Unix socket allows ` +
        `(${LONGEST_SOCKET_PATH} bytes): give a shorter DATA_DIR, or a Redis in REDIS_URL`,
    );
    process.exit(1);
  }
  const dir = dirname(path);
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
    const { whenStopped } = await import("../core/lifecycle");
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

/**
 * For the command line: with no Redis named, the private redis-server of the Parley on this DATA_DIR
 * when it answers, so that what a command announces (a revoked key, say) reaches the running Parley.
 * True when REDIS_URL now names it.
 */
export async function joinPrivateRedis(): Promise<boolean> {
  if (config.redis.explicit || !(await redisAnswers({ path: privateRedisSocket() }))) return false;
  process.env.REDIS_URL = privateRedisSocket();
  return true;
}
