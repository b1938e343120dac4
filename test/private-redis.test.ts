/**
 * The private redis-server `npm start` runs when no Redis answers: reachable by Parley's user alone
 * (a Unix socket in DATA_DIR, no TCP port), and stopped by Parley after its own drain, so Ctrl-C in
 * a terminal is as quiet as SIGTERM. Parley runs in a network namespace of its own, where no Redis
 * answers on 6379 and every port is free, and in a process group of its own, which a terminal's
 * Ctrl-C signals as a whole. The second local user is a real one (`useradd -M`).
 */
import { afterAll, expect, test } from "bun:test";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Redis } from "ioredis";
import { createAccount } from "../src/modules/accounts/service";
import { collect, migratedDataDir } from "./support/parley";
import { until } from "./support/wait";

const ROOT = resolve(import.meta.dir, "..");
const OTHER_USER = "parley-other";
if (Bun.spawnSync(["id", "-u", OTHER_USER]).exitCode !== 0) {
  const made = Bun.spawnSync(["useradd", "-M", "-s", "/usr/sbin/nologin", OTHER_USER], { stderr: "pipe" });
  if (made.exitCode !== 0) throw new Error(`useradd ${OTHER_USER}: ${made.stderr.toString()}`);
}

const parent = mkdtempSync(join(tmpdir(), "parley-private-redis-"));
afterAll(() => rmSync(parent, { recursive: true, force: true }));

function run(command: string[]) {
  const done = Bun.spawnSync(command, { stdout: "pipe", stderr: "pipe" });
  return { code: done.exitCode, said: done.stdout.toString() + done.stderr.toString() };
}

test("the private Redis listens on no TCP port, refuses the other user, and Ctrl-C stops Parley quietly", async () => {
  // Any user may cross the parents: only DATA_DIR's own modes and the socket's keep the other user out.
  chmodSync(parent, 0o755);
  const dataDir = join(parent, "data");
  mkdirSync(dataDir);
  await migratedDataDir(dataDir);
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    DATA_DIR: dataDir,
    SIP_ENABLED: "false",
    LOG_LEVEL: "info",
    REDIS_PREFIX: `parley-test-private-${process.pid}`,
  };
  delete env.DATABASE_URL;
  delete env.REDIS_URL;
  // setsid: the group Ctrl-C would signal is Parley's own; unshare: a network with loopback alone.
  const child = Bun.spawn(
    ["setsid", "unshare", "-n", "sh", "-c", `ip link set lo up && exec "${process.execPath}" src/index.ts`],
    { cwd: ROOT, env, stdout: "pipe", stderr: "pipe", stdin: "ignore" },
  );
  const output: string[] = [];
  for (const stream of [child.stdout, child.stderr]) collect(stream, output);
  const said = () => output.join("");
  try {
    await until(() => said().includes('"msg":"parley ready"') || child.exitCode !== null, Boolean, 60_000, 200);
    expect(said()).toContain('"msg":"parley ready"');

    const listening = run(["nsenter", "-t", String(child.pid), "-n", "ss", "-Hltn"]).said;
    expect(listening).not.toContain(":6390");
    const socket = join(dataDir, "redis", "redis.sock");
    expect(existsSync(socket)).toBe(true);
    expect(run(["redis-cli", "-s", socket, "ping"]).said.trim()).toBe("PONG");
    expect(run(["runuser", "-u", OTHER_USER, "--", "redis-cli", "-s", socket, "ping"]).said).not.toContain("PONG");
    // With the folders opened up, the socket's own mode still refuses the other user.
    chmodSync(dataDir, 0o755);
    chmodSync(join(dataDir, "redis"), 0o755);
    const refused = run(["runuser", "-u", OTHER_USER, "--", "redis-cli", "-s", socket, "ping"]).said;
    expect(refused).toContain("Permission denied");
    chmodSync(dataDir, 0o700);
    chmodSync(join(dataDir, "redis"), 0o700);

    // Ctrl-C: SIGINT to the whole foreground process group.
    const before = said().length;
    process.kill(-child.pid, "SIGINT");
    const code = await Promise.race([child.exited, Bun.sleep(30_000).then(() => "still running" as const)]);
    const afterwards = said().slice(before);
    expect(code).toBe(0);
    expect(afterwards).not.toContain('"level":40');
    expect(afterwards).not.toContain("ECONNREFUSED");
    expect(afterwards).toContain('"signal":"SIGINT"');
    // Its Redis went with it, once Parley had drained.
    expect(
      await until(
        () => existsSync(socket),
        (exists) => !exists,
        10_000,
      ),
    ).toBe(false);
    expect(run(["pgrep", "-f", `redis-server unixsocket:${socket}`]).code).not.toBe(0);
  } catch (error) {
    throw new Error(`${(error as Error).message}\n--- Parley said:\n${said().slice(-4000)}`);
  } finally {
    if (child.exitCode === null) process.kill(-child.pid, "SIGKILL");
    const stray = run(["pgrep", "-f", `redis-server unixsocket:${join(dataDir, "redis")}`]).said.trim();
    for (const pid of stray.split("\n").filter(Boolean)) process.kill(Number(pid), "SIGKILL");
  }
}, 120_000);

test("the command line announces on the private Redis of the Parley on its DATA_DIR", async () => {
  const dataDir = join(parent, "cli");
  mkdirSync(join(dataDir, "redis"), { recursive: true, mode: 0o700 });
  const socket = join(dataDir, "redis", "redis.sock");
  // As `npm start` leaves it running.
  const redis = Bun.spawn(["redis-server", "--port", "0", "--unixsocket", socket, "--unixsocketperm", "700"], {
    stdout: "ignore",
    stderr: "ignore",
  });
  expect(await until(() => existsSync(socket), Boolean, 10_000)).toBe(true);
  const listener = new Redis(socket, { maxRetriesPerRequest: 1 });
  try {
    const heard: string[] = [];
    listener.on("pmessage", (_pattern, channel) => heard.push(channel));
    const subscribed = await until(
      () =>
        listener.psubscribe("*").then(
          () => true,
          () => false,
        ),
      Boolean,
      10_000,
    );
    expect(subscribed).toBe(true);
    const { account } = await createAccount("announced");
    const env: Record<string, string> = { ...(process.env as Record<string, string>), DATA_DIR: dataDir };
    delete env.REDIS_URL;
    const command = Bun.spawn([process.execPath, "src/parley.ts", "rotate-key", account.id], {
      cwd: ROOT,
      env,
      stdout: "pipe",
      stderr: "pipe",
    });
    const [code, said] = await Promise.all([command.exited, new Response(command.stderr).text()]);
    expect(code, said).toBe(0);
    const announced = (channels: string[]) => channels.some((channel) => channel.endsWith("invalidate:accounts"));
    expect(await until(() => heard, announced, 10_000)).toSatisfy(announced);
  } finally {
    listener.disconnect();
    redis.kill("SIGKILL");
  }
});

test("a DATA_DIR too long for the private Redis's socket stops the start with what to do", async () => {
  const dataDir = join(parent, "d".repeat(100));
  const env: Record<string, string> = { ...(process.env as Record<string, string>), DATA_DIR: dataDir };
  delete env.DATABASE_URL;
  delete env.REDIS_URL;
  const child = Bun.spawn(
    ["unshare", "-n", "sh", "-c", `ip link set lo up && exec "${process.execPath}" src/index.ts`],
    { cwd: ROOT, env, stdout: "pipe", stderr: "pipe", stdin: "ignore" },
  );
  const killer = setTimeout(() => child.kill("SIGKILL"), 30_000);
  const [code, stderr] = await Promise.all([child.exited, new Response(child.stderr).text()]);
  clearTimeout(killer);
  expect(stderr).toContain("longer than a Unix socket allows");
  expect(stderr).toContain("REDIS_URL");
  expect(code).toBe(1);
});

test("a role started alone on the machine, with no Redis named, joins the private Redis", async () => {
  const dataDir = join(parent, "role");
  mkdirSync(join(dataDir, "redis"), { recursive: true, mode: 0o700 });
  const socket = join(dataDir, "redis", "redis.sock");
  const redis = Bun.spawn(["redis-server", "--port", "0", "--unixsocket", socket, "--unixsocketperm", "700"], {
    stdout: "ignore",
    stderr: "ignore",
  });
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    DATA_DIR: dataDir,
    LOG_LEVEL: "info",
  };
  delete env.REDIS_URL;
  const role = Bun.spawn([process.execPath, "src/index.ts", "--role=cdr"], {
    cwd: ROOT,
    env,
    stdout: "pipe",
    stderr: "pipe",
  });
  // What the role said, for a failure's message: whether it started, stopped, or waited on something.
  const said: string[] = [];
  for (const stream of [role.stdout, role.stderr]) collect(stream, said);
  try {
    expect(await until(() => existsSync(socket), Boolean, 10_000)).toBe(true);
    const clients = () => run(["redis-cli", "-s", socket, "client", "list"]).said;
    const listed = await until(clients, (list) => list.includes("name=parley:"), 20_000);
    expect(listed, `exit ${role.exitCode ?? "(running)"}; the role said:\n${said.join("").slice(-3000)}`).toContain(
      "name=parley:",
    );
  } finally {
    role.kill("SIGTERM");
    await Promise.race([role.exited, Bun.sleep(15_000)]);
    role.kill("SIGKILL");
    redis.kill("SIGKILL");
  }
});
