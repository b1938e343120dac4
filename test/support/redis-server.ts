/** A private redis-server on a free port, for tests that kill Redis and bring it back. */
import { type Subprocess, spawn, spawnSync } from "bun";
import { freePort } from "./ports";

function answers(port: number): boolean {
  const probe = spawnSync(["redis-cli", "-h", "127.0.0.1", "-p", String(port), "ping"], {
    stdout: "pipe",
    stderr: "ignore",
    timeout: 2_000,
  });
  return probe.stdout.toString().trim() === "PONG";
}

export interface PrivateRedis {
  port: number;
  url: string;
  /** Starts redis-server (again) on the same port, empty: nothing is saved to disk. */
  start(): Promise<void>;
  /** SIGKILL: whatever lived only in this Redis is gone. */
  kill(): Promise<void>;
}

export async function privateRedis(): Promise<PrivateRedis> {
  const port = await freePort();
  let server: Subprocess | undefined;
  const redis: PrivateRedis = {
    port,
    url: `redis://127.0.0.1:${port}`,
    async start() {
      server = spawn(
        ["redis-server", "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        { stdout: "ignore", stderr: "ignore" },
      );
      const deadline = Date.now() + 10_000;
      while (!answers(port)) {
        if (Date.now() > deadline) throw new Error(`redis-server on port ${port} did not answer within 10 s`);
        await Bun.sleep(50);
      }
    },
    async kill() {
      server?.kill("SIGKILL");
      await server?.exited;
      server = undefined;
    },
  };
  await redis.start();
  return redis;
}
