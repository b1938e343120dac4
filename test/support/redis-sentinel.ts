/**
 * A private Redis master, one replica and three sentinels (`redis-server --sentinel`, quorum 2)
 * on free loopback ports, for tests that kill the master and watch a replica take over.
 * Nothing is kept: the temp folder holds the sentinels' config files (which they rewrite) and
 * the copy of the master's data the replica receives when it syncs.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Subprocess, spawn, spawnSync } from "bun";
import { freePort } from "./ports";
import { until } from "./wait";

export const SENTINEL_NAME = "parley-test";
/** How long the sentinels wait on a silent master before they call it down and fail over. */
const DOWN_AFTER_MS = 1_000;

function cli(port: number, ...args: string[]): string {
  const run = spawnSync(["redis-cli", "-h", "127.0.0.1", "-p", String(port), ...args], {
    stdout: "pipe",
    stderr: "ignore",
    timeout: 2_000,
  });
  return run.stdout.toString().trim();
}

export interface SentinelGroup {
  /** For REDIS_SENTINELS. */
  sentinels: string;
  masterPort: number;
  replicaPort: number;
  /** The port the sentinels name as master now (asks the first that answers). */
  currentMaster(): number | undefined;
  /** The connection names of the clients of the Redis on `port`. */
  clientNames(port: number): string[];
  /** SIGKILL of the master that the sentinels named first. */
  killMaster(): Promise<void>;
  /**
   * Resolves once the replica has synced and every sentinel knows the other two and the replica:
   * only then can the group fail over. Rejects (the group stopped) when that takes over 60 s.
   */
  failoverReady: Promise<void>;
  stop(): Promise<void>;
}

export async function startSentinelGroup(): Promise<SentinelGroup> {
  const dir = mkdtempSync(join(tmpdir(), "parley-sentinel-"));
  const masterPort = await freePort();
  const replicaPort = await freePort();
  const sentinelPorts = [await freePort(), await freePort(), await freePort()];
  const children: Subprocess[] = [];
  const server = (port: number, ...extra: string[]) =>
    spawn(
      [
        "redis-server",
        "--port",
        String(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        dir,
        "--save",
        "",
        "--appendonly",
        "no",
        ...extra,
      ],
      { stdout: "ignore", stderr: "ignore" },
    );
  const master = server(masterPort);
  children.push(master, server(replicaPort, "--replicaof", "127.0.0.1", String(masterPort)));
  for (const port of sentinelPorts) {
    const file = join(dir, `sentinel-${port}.conf`);
    writeFileSync(
      file,
      [
        `port ${port}`,
        "bind 127.0.0.1",
        `dir ${dir}`,
        `sentinel monitor ${SENTINEL_NAME} 127.0.0.1 ${masterPort} 2`,
        `sentinel down-after-milliseconds ${SENTINEL_NAME} ${DOWN_AFTER_MS}`,
        `sentinel failover-timeout ${SENTINEL_NAME} 10000`,
        `sentinel parallel-syncs ${SENTINEL_NAME} 1`,
        "",
      ].join("\n"),
    );
    children.push(spawn(["redis-server", file, "--sentinel"], { stdout: "ignore", stderr: "ignore" }));
  }
  const group: Omit<SentinelGroup, "failoverReady"> = {
    sentinels: sentinelPorts.map((port) => `127.0.0.1:${port}`).join(","),
    masterPort,
    replicaPort,
    currentMaster() {
      for (const port of sentinelPorts) {
        const [, masterAt] = cli(port, "sentinel", "get-master-addr-by-name", SENTINEL_NAME).split("\n");
        if (masterAt) return Number(masterAt);
      }
      return undefined;
    },
    clientNames(port) {
      return [...cli(port, "client", "list").matchAll(/ name=(\S*)/g)].map((match) => match[1]!);
    },
    async killMaster() {
      master.kill("SIGKILL");
      await master.exited;
    },
    async stop() {
      for (const child of children) child.kill("SIGKILL");
      await Promise.all(children.map((child) => child.exited));
      rmSync(dir, { recursive: true, force: true });
    },
  };
  // Clients may connect once every sentinel names the master. The sentinels take a few seconds
  // more to find each other (their hellos go out every 2 s), which a test can spend starting its
  // clients: failoverReady says when they have.
  const namesMaster = (port: number) =>
    cli(port, "sentinel", "get-master-addr-by-name", SENTINEL_NAME).endsWith(`\n${masterPort}`);
  const named = await until(() => sentinelPorts.every(namesMaster), Boolean, 30_000, 50);
  if (!named) {
    await group.stop();
    throw new Error("the private Redis sentinels did not name the master within 30 s");
  }
  const failoverReady = until(
    () => {
      const link = cli(replicaPort, "info", "replication").includes("master_link_status:up");
      const known = sentinelPorts.every((port) => {
        const info = cli(port, "info", "sentinel");
        return info.includes(`name=${SENTINEL_NAME},status=ok`) && info.includes("slaves=1,sentinels=3");
      });
      return link && known;
    },
    Boolean,
    // A sentinel learns of the replica from the master's INFO, which it asks for every 10 s: a replica that
    // synced just after one is known 10 s later, and a machine busy with other tests stretches each step.
    60_000,
    200,
  ).then(async (ready) => {
    if (ready) return;
    await group.stop();
    throw new Error("the private Redis master, replica and sentinels did not come up within 60 s");
  });
  // Awaited by the test; never an unhandled rejection meanwhile.
  failoverReady.catch(() => {});
  return { ...group, failoverReady };
}
