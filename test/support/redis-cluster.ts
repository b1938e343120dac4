/**
 * A private Redis Cluster of three primaries and three replicas (`redis-server --cluster-enabled
 * yes`, joined by `redis-cli --cluster create --cluster-replicas 1`) on free loopback ports, for
 * tests that kill a primary and watch its replica take over. Nothing is kept: the temp folder
 * holds the nodes' cluster config files.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type Subprocess, spawn, spawnSync } from "bun";
import { freePort } from "./ports";
import { until } from "./wait";

/** How long the others wait on a silent node before they call it failed and its replica is promoted. */
const NODE_TIMEOUT_MS = 1_000;

function cli(port: number, ...args: string[]): string {
  const run = spawnSync(["redis-cli", "-h", "127.0.0.1", "-p", String(port), ...args], {
    stdout: "pipe",
    stderr: "ignore",
    timeout: 2_000,
  });
  return run.stdout.toString().trim();
}

export interface RedisCluster {
  /** For REDIS_CLUSTER_NODES. */
  nodes: string;
  ports: number[];
  /** The port of the primary that holds `key`'s slot now, as a node that answers says. */
  primaryOf(key: string): number | undefined;
  /** Whether every node still running says the cluster is ok (every slot served). */
  healthy(): boolean;
  /** What redis-cli prints for a command to the node on `port` (its own keys and channels only). */
  command(port: number, ...args: string[]): string;
  /** The connection names of the clients of the node on `port`. */
  clientNames(port: number): string[];
  /** SIGKILL of the node on `port`. */
  kill(port: number): Promise<void>;
  stop(): Promise<void>;
}

export async function startRedisCluster(): Promise<RedisCluster> {
  const dir = mkdtempSync(join(tmpdir(), "parley-cluster-"));
  const ports: number[] = [];
  const children = new Map<number, Subprocess>();
  const taken = new Set<number>();
  // Twelve ports, none twice: freePort may hand back a port it gave a moment ago.
  const distinctPort = async () => {
    for (;;) {
      const port = await freePort();
      if (taken.has(port)) continue;
      taken.add(port);
      return port;
    }
  };
  for (let i = 0; i < 6; i++) {
    const port = await distinctPort();
    // The bus port is given: the default (port + 10000) may be past 65535 for a port from freePort.
    const busPort = await distinctPort();
    ports.push(port);
    children.set(
      port,
      spawn(
        [
          "redis-server",
          "--port",
          String(port),
          "--cluster-port",
          String(busPort),
          "--bind",
          "127.0.0.1",
          "--dir",
          dir,
          "--cluster-enabled",
          "yes",
          "--cluster-config-file",
          `nodes-${port}.conf`,
          "--cluster-node-timeout",
          String(NODE_TIMEOUT_MS),
          "--save",
          "",
          "--appendonly",
          "no",
        ],
        { stdout: "ignore", stderr: "ignore" },
      ),
    );
  }
  const running = () => ports.filter((port) => children.has(port));
  const cluster: RedisCluster = {
    nodes: ports.map((port) => `127.0.0.1:${port}`).join(","),
    ports,
    primaryOf(key) {
      for (const port of running()) {
        const slot = Number(cli(port, "cluster", "keyslot", key));
        if (!Number.isInteger(slot)) continue;
        for (const line of cli(port, "cluster", "nodes").split("\n")) {
          const [, address, flags, , , , , state, ...ranges] = line.split(" ");
          if (!flags?.includes("master") || flags.includes("fail") || state !== "connected") continue;
          const served = ranges.some((range) => {
            const [from, to = from] = range.split("-").map(Number);
            return slot >= from! && slot <= to!;
          });
          if (served) return Number(address!.split("@")[0]!.split(":")[1]);
        }
      }
      return undefined;
    },
    healthy() {
      return running().every((port) => cli(port, "cluster", "info").includes("cluster_state:ok"));
    },
    command: cli,
    clientNames(port) {
      return [...cli(port, "client", "list").matchAll(/ name=(\S*)/g)].map((match) => match[1]!);
    },
    async kill(port) {
      const child = children.get(port);
      children.delete(port);
      child?.kill("SIGKILL");
      await child?.exited;
    },
    async stop() {
      for (const child of children.values()) child.kill("SIGKILL");
      await Promise.all([...children.values()].map((child) => child.exited));
      children.clear();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    const answering = await until(() => ports.every((port) => cli(port, "ping") === "PONG"), Boolean, 10_000, 50);
    if (!answering) throw new Error("the cluster's redis-servers did not answer within 10 s");
    const create = spawnSync(
      ["redis-cli", "--cluster", "create", ...ports.map((port) => `127.0.0.1:${port}`)].concat([
        "--cluster-replicas",
        "1",
        "--cluster-yes",
      ]),
      { stdout: "pipe", stderr: "pipe", timeout: 20_000 },
    );
    if (create.exitCode !== 0) throw new Error(`redis-cli --cluster create failed: ${create.stdout}${create.stderr}`);
    // Every slot served and every replica synced (only a synced replica can take its primary's place).
    const ready = await until(
      () =>
        cluster.healthy() &&
        ports.every((port) => {
          const replication = cli(port, "info", "replication");
          return replication.includes("role:master") || replication.includes("master_link_status:up");
        }),
      Boolean,
      20_000,
      100,
    );
    if (!ready) throw new Error("the Redis Cluster was not ok within 20 s");
    return cluster;
  } catch (error) {
    await cluster.stop();
    throw error;
  }
}
