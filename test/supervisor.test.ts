/**
 * The supervisor as an operator runs it: real child processes on one port, a crashed
 * child restarted, SIGTERM draining in-flight requests and exiting 0.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROLES } from "../src/process/roles";
import { freePort } from "./support/ports";
import { newAccount } from "./helpers";
import { childPids, commandLine, isAlive, listensOn, rolesOf, threadsLeft, until } from "./support/wait";

const entry = new URL("../src/index.ts", import.meta.url).pathname;

/** No pooled connection: one kept alive to a child killed by the test would fail the next request. */
const fresh = (url: string, init: RequestInit = {}) => fetch(url, { ...init, keepalive: false });

/**
 * Polls until the probe gives a value. The ceiling is generous: a start takes a few seconds on an idle
 * machine and several times that on one running two suites; a start that works is not waited out.
 */
async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 45_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    await Bun.sleep(100);
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** Every role runs, the SIP gateway among them: on free ports, never the machine's 5060. */
async function sipPorts() {
  return { SIP_UDP_PORT: String(await freePort()), SIP_TCP_PORT: String(await freePort()) };
}

function startSupervisor(env: Record<string, string>) {
  return Bun.spawn([process.execPath, entry], {
    // Their own Redis prefix: a worker child still stopping must not take the next test file's jobs.
    env: {
      ...process.env,
      LOG_LEVEL: "silent",
      SHUTDOWN_GRACE_MS: "5000",
      REDIS_PREFIX: `parley-test-supervised-${crypto.randomUUID()}`,
      ...env,
    },
    stdout: "ignore",
    stderr: "inherit",
  });
}

describe("supervisor on PostgreSQL", () => {
  let port: number;
  let supervisor: ReturnType<typeof startSupervisor>;

  beforeAll(async () => {
    port = await freePort();
    supervisor = startSupervisor({ PORT: String(port), API_PROCESSES: "2", HOST: "127.0.0.1", ...(await sipPorts()) });
    await waitFor("the pool", async () => ((await fresh(`http://127.0.0.1:${port}/readyz`)).ok ? true : undefined));
  }, 60_000);

  afterAll(() => supervisor.kill("SIGKILL"));

  test("runs the configured number of API processes on one port", async () => {
    const roles = await waitFor("every role's child", async () => {
      const found = Object.fromEntries(Object.keys(ROLES).map((role) => [role, childPids(supervisor.pid, role)]));
      const others = Object.entries(found).filter(([role]) => role !== "api");
      return found.api!.length === 2 && others.every(([, pids]) => pids.length === 1) ? found : undefined;
    });
    expect(roles.api).toHaveLength(2);
    expect(Object.keys(roles)).toEqual(expect.arrayContaining(["api", "recorder", "sip", "cdr"]));
    // The worker roles together in one child (WORKER_PROCESSES=shared, the default).
    const workers = new Set(Object.entries(roles).flatMap(([role, pids]) => (role === "api" ? [] : pids)));
    expect(workers.size).toBe(1);
    expect(rolesOf([...workers][0]!).sort()).toEqual(
      Object.keys(ROLES)
        .filter((role) => role !== "api")
        .sort(),
    );
    const answers = await Promise.all(
      Array.from({ length: 20 }, () => fresh(`http://127.0.0.1:${port}/healthz`).then((response) => response.status)),
    );
    expect(answers.every((status) => status === 200)).toBe(true);
  }, 60_000);

  test("restarts a child that dies, and keeps serving meanwhile", async () => {
    // Both listening first: on a busy machine one may still be starting (a child restarted
    // earlier), and killing the other would leave the port with no listener at all.
    const before = await waitFor("both API children listening", async () => {
      const pids = childPids(supervisor.pid, "api");
      return pids.length === 2 && pids.every((pid) => listensOn(pid, port)) ? pids : undefined;
    });
    process.kill(before[0]!, "SIGKILL");
    // Connections already queued on the killed process's socket are reset by the kernel; once its
    // socket is closed, the surviving process takes every new one. The main thread turns zombie
    // before the other threads have let go of the process's files, so the wait is for all of them.
    await until(
      () => threadsLeft(before[0]!),
      (left) => left === 0,
      10_000,
      20,
    );
    const statuses = await Promise.all(
      Array.from({ length: 10 }, () => fresh(`http://127.0.0.1:${port}/healthz`).then((r) => r.status)),
    );
    expect(statuses).toEqual(Array(10).fill(200));
    const after = await waitFor("a replacement API child", async () => {
      const now = childPids(supervisor.pid, "api");
      return now.length === 2 && !now.includes(before[0]!) ? now : undefined;
    });
    expect(after).toContain(before[1]!);
  }, 60_000);

  test("the worker roles' child that dies is restarted as a unit, every role in the new one", async () => {
    const workerRoles = Object.keys(ROLES).filter((role) => role !== "api");
    const [before] = await waitFor("the workers' child", async () => {
      const pids = childPids(supervisor.pid, "cdr");
      return pids.length === 1 ? pids : undefined;
    });
    const apis = childPids(supervisor.pid, "api");
    process.kill(before!, "SIGKILL");
    const after = await waitFor("a replacement workers' child", async () => {
      const pids = childPids(supervisor.pid, "recorder");
      return pids.length === 1 && pids[0] !== before ? pids[0] : undefined;
    });
    expect(rolesOf(after).sort()).toEqual(workerRoles.sort());
    for (const role of workerRoles) expect(childPids(supervisor.pid, role)).toEqual([after]);
    // The API's children were not touched.
    expect(childPids(supervisor.pid, "api")).toEqual(apis);
  }, 60_000);

  // Last on this supervisor: a start of its own would cost every role's child's start again.
  test("killed outright, it leaves no child behind: each notices and stops itself", async () => {
    let children: number[] = [];
    try {
      children = await waitFor("two children of the API, one of the worker roles", async () => {
        const found = childPids(supervisor.pid);
        return found.length === 3 && (await fresh(`http://127.0.0.1:${port}/readyz`)).ok ? found : undefined;
      });
    } finally {
      supervisor.kill("SIGKILL");
    }
    const survivors = await until(
      () => children.filter(isAlive),
      (left) => left.length === 0,
      20_000,
    );
    expect(survivors).toEqual([]);
  }, 75_000);
});

test("a role process whose supervisor is already gone when it starts stops itself", async () => {
  // A supervisor killed while its child still loaded its modules: the child's parent is init by the time it could
  // look, and only the pid the supervisor gave it says that it is gone.
  const gone = Bun.spawn(["true"]);
  await gone.exited;
  const child = Bun.spawn([process.execPath, entry, `--supervisor-pid=${gone.pid}`, "--role=webhooks"], {
    env: { ...process.env, LOG_LEVEL: "silent", REDIS_PREFIX: `parley-test-orphan-${crypto.randomUUID()}` },
    stdout: "ignore",
    stderr: "inherit",
  });
  try {
    const code = await Promise.race([child.exited, Bun.sleep(30_000).then(() => "still running")]);
    expect(code).toBe(0);
  } finally {
    child.kill("SIGKILL");
  }
}, 40_000);

test("a supervisor killed while its database is prepared leaves no preparing process behind", async () => {
  // Nothing answers there: the preparation waits for the database until its supervisor is gone.
  const supervisor = startSupervisor({
    PORT: String(await freePort()),
    HOST: "127.0.0.1",
    DATABASE_URL: `postgres://postgres@127.0.0.1:${await freePort()}/parley`,
    METRICS_PORT: "0",
    ...(await sipPorts()),
  });
  try {
    const [preparing] = await waitFor("the preparing child", async () => {
      const pids = childPids(supervisor.pid).filter((pid) => commandLine(pid).includes("--prepare"));
      return pids.length === 1 ? pids : undefined;
    });
    supervisor.kill("SIGKILL");
    const left = await until(
      () => isAlive(preparing!),
      (alive) => !alive,
      10_000,
    );
    expect(left).toBe(false);
  } finally {
    supervisor.kill("SIGKILL");
  }
}, 40_000);

test("--role= refuses an unknown role, and api among others, before it opens anything", async () => {
  for (const [roles, said] of [
    ["recorder,nope", 'unknown role "nope"'],
    ["api,cdr", "roles run together are worker roles, each named once; api runs alone"],
    ["cdr,cdr", "each named once"],
  ]) {
    const child = Bun.spawn([process.execPath, entry, `--role=${roles}`], {
      env: { ...process.env, LOG_LEVEL: "silent" },
      stdout: "ignore",
      stderr: "pipe",
    });
    const [code, stderr] = await Promise.all([child.exited, new Response(child.stderr).text()]);
    expect({ roles, code, said: stderr.includes(said!) }).toEqual({ roles, code: 2, said: true });
  }
}, 30_000);

describe("readiness", () => {
  test("/readyz stays 200 but says degraded, naming Redis, when Redis is down", async () => {
    const port = await freePort();
    const deadRedis = await freePort();
    const api = Bun.spawn([process.execPath, entry, "--role=api"], {
      env: {
        ...process.env,
        LOG_LEVEL: "silent",
        PORT: String(port),
        HOST: "127.0.0.1",
        REDIS_URL: `redis://127.0.0.1:${deadRedis}`,
      },
      stdout: "ignore",
      stderr: "ignore",
    });
    try {
      const answer = await waitFor("the API", async () => {
        const response = await fresh(`http://127.0.0.1:${port}/readyz`);
        return { status: response.status, body: await response.json() };
      });
      // Most routes work without Redis: a load balancer must keep sending them traffic (docs/fault-injection.md).
      expect(answer).toEqual({ status: 200, body: { status: "degraded", database: "ok", redis: "down" } });
    } finally {
      api.kill("SIGKILL");
    }
  }, 60_000);
});

describe("embedded database", () => {
  test("starts on PGlite with no DATABASE_URL, makes the first account and issues tokens", async () => {
    const port = await freePort();
    // A folder no earlier run can have left: a pid is reused, and a folder that already holds an account gets no key.
    const dataDir = mkdtempSync(join(tmpdir(), "parley-embedded-"));
    const env: Record<string, string> = { ...(process.env as Record<string, string>), LOG_LEVEL: "silent" };
    delete env.DATABASE_URL;
    const service = Bun.spawn([process.execPath, entry], {
      env: {
        ...env,
        PORT: String(port),
        HOST: "127.0.0.1",
        DATA_DIR: dataDir,
        BOOTSTRAP_ACCOUNT: "true",
        ...(await sipPorts()),
      },
      stdout: "ignore",
      stderr: "inherit",
    });
    try {
      // What the last look saw, so a start that never gets there says which half was missing.
      const seen = { ready: false, key: false };
      const key = await Promise.race([
        waitFor(
          "the first API key",
          async () => {
            const file = Bun.file(`${dataDir}/first-api-key`);
            seen.ready = (await fresh(`http://127.0.0.1:${port}/readyz`)).ok;
            seen.key = await file.exists();
            return seen.ready && seen.key ? (await file.text()).trim() : undefined;
          },
          // A first start on an empty folder: PGlite's initdb and every migration.
          75_000,
        ).catch((error: Error) => {
          throw new Error(`${error.message} (readyz ok: ${seen.ready}, key written: ${seen.key})`);
        }),
        service.exited.then((code) => {
          throw new Error(`Parley exited with ${code} before its first API key`);
        }),
      ]);
      const response = await fresh(`http://127.0.0.1:${port}/api/v1/misc/generate-token`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ apiKey: key }),
      });
      expect(response.status).toBe(200);
      service.kill("SIGTERM");
      expect(await service.exited).toBe(0);
      // Private to this user throughout, the files PGlite unpacks and writes 0666 and 0644 included.
      const open = Bun.spawnSync(["find", dataDir, "-perm", "/077", "!", "-type", "l"]).stdout.toString();
      expect(open).toBe("");
    } finally {
      service.kill("SIGKILL");
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 90_000);
});

describe("a supervisor with a role disabled, each worker role in its own process", () => {
  let port: number;
  let supervisor: Bun.Subprocess<"ignore", "pipe", "inherit">;
  let apiKey: string;

  beforeAll(async () => {
    port = await freePort();
    apiKey = (await newAccount()).apiKey;
    supervisor = Bun.spawn([process.execPath, entry], {
      env: {
        ...process.env,
        LOG_LEVEL: "warn",
        SHUTDOWN_GRACE_MS: "5000",
        PORT: String(port),
        API_PROCESSES: "1",
        HOST: "127.0.0.1",
        SIP_ENABLED: "false",
        WORKER_PROCESSES: "per-role",
        REDIS_PREFIX: `parley-test-supervised-${crypto.randomUUID()}`,
      },
      stdout: "pipe",
      stderr: "inherit",
    });
    await waitFor("the other roles", async () => {
      const ready = (await fresh(`http://127.0.0.1:${port}/readyz`)).ok;
      return ready &&
        childPids(supervisor.pid, "recorder").length === 1 &&
        childPids(supervisor.pid, "cdr").length === 1
        ? true
        : undefined;
    });
  }, 60_000);

  afterAll(() => supervisor.kill("SIGKILL"));

  test("WORKER_PROCESSES=per-role runs each enabled worker role in a child of its own", async () => {
    const workers = await waitFor("a child for each worker role", async () => {
      const found = ["recorder", "cdr", "webhooks"].map((role) => childPids(supervisor.pid, role));
      return found.every((pids) => pids.length === 1) ? found.flat() : undefined;
    });
    expect(new Set(workers).size).toBe(3);
    for (const pid of workers) expect(rolesOf(pid)).toHaveLength(1);
  });

  test("SIP_ENABLED=false starts no sip child, so none exits and is restarted", async () => {
    // Long enough for a child that exits at once to be started, exit and be restarted twice (0.5 s, then 1 s).
    const sipSeen = new Set<number>();
    const deadline = Date.now() + 3_000;
    while (Date.now() < deadline) {
      for (const pid of childPids(supervisor.pid, "sip")) sipSeen.add(pid);
      await Bun.sleep(50);
    }
    expect([...sipSeen]).toEqual([]);
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
    // Nor did any child exit before the shutdown: the disabled role's above, or another's.
    expect(await new Response(supervisor.stdout).text()).not.toContain("child exited");
  }, 20_000);
});
