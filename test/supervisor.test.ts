/**
 * The supervisor as an operator runs it: real child processes on one port, a crashed
 * child restarted, SIGTERM draining in-flight requests and exiting 0.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { ROLES } from "../src/roles";
import { freePort } from "./support/ports";
import { newAccount } from "./helpers";
import { isAlive, until } from "./support/wait";

const entry = new URL("../src/index.ts", import.meta.url).pathname;

/** No pooled connection: one kept alive to a child killed by the test would fail the next request. */
const fresh = (url: string, init: RequestInit = {}) => fetch(url, { ...init, keepalive: false });

async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    await Bun.sleep(100);
  }
  throw new Error(`timed out waiting for ${what}`);
}

function childPids(pid: number, role?: string): number[] {
  const out = Bun.spawnSync(["pgrep", "-P", String(pid), ...(role ? ["-f", `role=${role}$`] : [])]).stdout.toString();
  return out.split("\n").filter(Boolean).map(Number);
}

/** Every role runs, the SIP gateway among them: on free ports, never the machine's 5060. */
async function sipPorts() {
  return { SIP_UDP_PORT: String(await freePort()), SIP_TCP_PORT: String(await freePort()) };
}

function startSupervisor(env: Record<string, string>) {
  return Bun.spawn([process.execPath, entry], {
    env: { ...process.env, LOG_LEVEL: "silent", SHUTDOWN_GRACE_MS: "5000", ...env },
    stdout: "ignore",
    stderr: "inherit",
  });
}

describe("supervisor on PostgreSQL", () => {
  let port: number;
  let supervisor: ReturnType<typeof startSupervisor>;
  let apiKey: string;

  beforeAll(async () => {
    port = await freePort();
    apiKey = (await newAccount()).apiKey;
    supervisor = startSupervisor({ PORT: String(port), API_PROCESSES: "2", HOST: "127.0.0.1", ...(await sipPorts()) });
    await waitFor("the pool", async () => ((await fresh(`http://127.0.0.1:${port}/readyz`)).ok ? true : undefined));
  }, 20_000);

  afterAll(() => supervisor.kill("SIGKILL"));

  test("runs the configured number of API processes on one port", async () => {
    const roles = await waitFor("every role's child", async () => {
      const found = { api: childPids(supervisor.pid, "api"), recorder: childPids(supervisor.pid, "recorder"), sip: childPids(supervisor.pid, "sip") };
      return found.api.length === 2 && found.recorder.length === 1 && found.sip.length === 1 ? found : undefined;
    });
    expect(roles.api).toHaveLength(2);
    const answers = await Promise.all(
      Array.from({ length: 20 }, () => fresh(`http://127.0.0.1:${port}/healthz`).then((response) => response.status)),
    );
    expect(answers.every((status) => status === 200)).toBe(true);
  });

  test("restarts a child that dies, and keeps serving meanwhile", async () => {
    const before = childPids(supervisor.pid, "api");
    process.kill(before[0]!, "SIGKILL");
    // Connections already queued on the killed process's socket are reset by the kernel;
    // once it is gone, the surviving process takes every new one.
    await Bun.sleep(300);
    const statuses = await Promise.all(Array.from({ length: 10 }, () => fresh(`http://127.0.0.1:${port}/healthz`).then((r) => r.status)));
    expect(statuses).toEqual(Array(10).fill(200));
    const after = await waitFor("a replacement API child", async () => {
      const now = childPids(supervisor.pid, "api");
      return now.length === 2 && !now.includes(before[0]!) ? now : undefined;
    });
    expect(after).toContain(before[1]!);
  });

  test("SIGTERM lets an in-flight request finish, then exits 0", async () => {
    // A body that arrives slowly keeps the request in flight while the signal lands.
    const body = JSON.stringify({ apiKey, user: { id: "drain" } });
    const stream = new ReadableStream<Uint8Array>({
      async start(controller) {
        controller.enqueue(new TextEncoder().encode(body.slice(0, 10)));
        await Bun.sleep(800);
        controller.enqueue(new TextEncoder().encode(body.slice(10)));
        controller.close();
      },
    });
    const inFlight = fresh(`http://127.0.0.1:${port}/api/v1/misc/generate-token`, {
      method: "POST",
      headers: { "content-type": "application/json", "content-length": String(body.length) },
      body: stream,
    });
    await Bun.sleep(300);
    supervisor.kill("SIGTERM");
    const response = await inFlight;
    expect(response.status).toBe(200);
    expect((await response.json()).token).toBeString();
    expect(await supervisor.exited).toBe(0);
    await expect(fresh(`http://127.0.0.1:${port}/healthz`)).rejects.toThrow();
  }, 20_000);
});

describe("readiness", () => {
  test("/readyz is 503 naming Redis when Redis is down", async () => {
    const port = await freePort();
    const deadRedis = await freePort();
    const api = Bun.spawn([process.execPath, entry, "--role=api"], {
      env: { ...process.env, LOG_LEVEL: "silent", PORT: String(port), HOST: "127.0.0.1", REDIS_URL: `redis://127.0.0.1:${deadRedis}` },
      stdout: "ignore",
      stderr: "ignore",
    });
    try {
      const answer = await waitFor("the API", async () => {
        const response = await fresh(`http://127.0.0.1:${port}/readyz`);
        return { status: response.status, body: await response.json() };
      });
      expect(answer).toEqual({ status: 503, body: { status: "unavailable", database: "ok", redis: "down" } });
    } finally {
      api.kill("SIGKILL");
    }
  }, 20_000);
});

describe("embedded database", () => {
  test("starts on PGlite with no DATABASE_URL, makes the first account and issues tokens", async () => {
    const port = await freePort();
    const dataDir = `${require("node:os").tmpdir()}/parley-embedded-${process.pid}`;
    const env: Record<string, string> = { ...(process.env as Record<string, string>), LOG_LEVEL: "silent" };
    delete env.DATABASE_URL;
    const service = Bun.spawn([process.execPath, entry], {
      env: { ...env, PORT: String(port), HOST: "127.0.0.1", DATA_DIR: dataDir, BOOTSTRAP_ACCOUNT: "true", ...(await sipPorts()) },
      stdout: "ignore",
      stderr: "inherit",
    });
    try {
      const key = await waitFor(
        "the first API key",
        async () => {
          const file = Bun.file(`${dataDir}/first-api-key`);
          const ready = (await fresh(`http://127.0.0.1:${port}/readyz`)).ok;
          return ready && (await file.exists()) ? (await file.text()).trim() : undefined;
        },
        30_000,
      );
      const response = await fresh(`http://127.0.0.1:${port}/api/v1/misc/generate-token`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ apiKey: key }),
      });
      expect(response.status).toBe(200);
      service.kill("SIGTERM");
      expect(await service.exited).toBe(0);
    } finally {
      service.kill("SIGKILL");
      require("node:fs").rmSync(dataDir, { recursive: true, force: true });
    }
  }, 60_000);
});

describe("a supervisor killed outright", () => {
  test("leaves no child behind: each notices and stops itself", async () => {
    const port = await freePort();
    const supervisor = startSupervisor({ PORT: String(port), API_PROCESSES: "1", HOST: "127.0.0.1", ...(await sipPorts()) });
    const children = await waitFor("every role's child", async () => {
      const found = childPids(supervisor.pid);
      // One API process and one child of every other role.
      return found.length === Object.keys(ROLES).length && (await fresh(`http://127.0.0.1:${port}/readyz`)).ok ? found : undefined;
    });
    supervisor.kill("SIGKILL");
    const survivors = await until(() => children.filter(isAlive), (left) => left.length === 0, 20_000);
    expect(survivors).toEqual([]);
  });
});
