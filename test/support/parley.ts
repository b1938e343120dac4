/**
 * Parley as a user starts it: `bun src/index.ts` (the supervisor with every role) as a child
 * process on free ports, on the embedded database (no DATABASE_URL, PGlite in a temp DATA_DIR)
 * or on the test PostgreSQL. Its output is kept so a failing wait can show what it said.
 */
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import type { Subprocess } from "bun";
import { Redis } from "ioredis";
import { madeOnce } from "./made-once";
import { freePort } from "./ports";
import type { ValidatingProxy } from "./validating-proxy";
import { isAlive, until } from "./wait";

const ROOT = resolve(import.meta.dir, "../..");
const ENTRY = join(ROOT, "src/index.ts");

export interface ParleyOptions {
  /** true: no DATABASE_URL, so Parley runs on PGlite in its DATA_DIR. */
  embedded: boolean;
  env?: Record<string, string>;
  /** A data folder to start on again (kept at cleanup: its owner removes it); a new temp one otherwise. */
  dataDir?: string;
  /**
   * true: none of the test run's settings (test/setup.ts's S3, sealing secret, …) reach it, only
   * its ports, its Redis and `env`, as a reader's `npm start` with the settings a page gives.
   */
  asReader?: boolean;
}

export interface Parley {
  base: string;
  ws: string;
  port: number;
  /** Where its Prometheus metrics are served (METRICS_PORT). */
  metrics: string;
  sipPort: number;
  dataDir: string;
  env: Record<string, string>;
  process: Subprocess;
  /** A validating proxy in front of it: http() then sends through it and fails on what it finds. */
  via?: ValidatingProxy;
  /** The last lines Parley wrote, for failure messages. */
  tail(lines?: number): string;
  /** Runs `bun src/parley.ts ...` beside it (through its local socket), bounded in time. */
  admin(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }>;
  /** Sends the signal and resolves with the exit code, or "still running" after `withinMs`. */
  stop(signal: "SIGTERM" | "SIGKILL", withinMs: number): Promise<number | "still running">;
  /** The API key a first start prints to DATA_DIR/first-api-key (BOOTSTRAP_ACCOUNT=true), once written. */
  firstApiKey(): Promise<string>;
  /** Stops it as an operator does (SIGTERM, SIGKILL after 10 s), then forgets it: its Redis keys and temp folder. */
  close(): Promise<void>;
  cleanup(): void;
}

/** Appends what `stream` carries to `into` as text, as it comes (a character split across chunks kept whole). */
export function collect(stream: ReadableStream<Uint8Array>, into: string[]): void {
  const decoder = new TextDecoder();
  (async () => {
    for await (const chunk of stream) into.push(decoder.decode(chunk, { stream: true }));
  })().catch(() => {});
}

/** Processes whose environment names the stream: its recorder. */
export function recordersOf(streamName: string): number[] {
  return readdirSync("/proc")
    .filter((entry) => /^\d+$/.test(entry))
    .filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").includes(`PARLEY_STREAM_NAME=${streamName}`);
      } catch {
        return false;
      }
    })
    .map(Number)
    .filter(isAlive);
}

/** A fault test's end: its nodes killed, the recorders of the streams it started with them, and their folders gone. */
export async function killNodes(nodes: Parley[], streamNames: string[]): Promise<void> {
  await Promise.all(nodes.map((node) => node.stop("SIGKILL", 5_000)));
  for (const name of streamNames)
    for (const pid of recordersOf(name)) {
      try {
        process.kill(-pid, "SIGKILL");
      } catch (error) {
        // Its group ended between the listing and the kill: what this was for.
        if ((error as NodeJS.ErrnoException).code !== "ESRCH") throw error;
      }
    }
  for (const node of nodes) node.cleanup();
}

/** Waits (bounded) for a probe to give a value; on time-out fails naming what and showing Parley's output. */
export async function within<T>(
  parley: Parley | undefined,
  what: string,
  timeoutMs: number,
  probe: () => Promise<T | undefined>,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    await Bun.sleep(100);
  }
  const why = last instanceof Error ? ` (last error: ${last.message})` : "";
  throw new Error(
    `timed out after ${timeoutMs} ms waiting for ${what}${why}${parley ? `\n--- Parley said:\n${parley.tail()}` : ""}`,
  );
}

export interface Answer {
  status: number;
  body: any;
}

/**
 * One HTTP request to a running Parley (through its validating proxy when it has one), bounded in
 * time; a failure to connect shows what Parley said, and an answer that breaks the OpenAPI
 * description what the proxy found.
 */
export async function http(
  parley: Parley,
  method: string,
  path: string,
  options: { body?: unknown; form?: Record<string, string>; auth?: string } = {},
): Promise<Answer> {
  const headers: Record<string, string> = {};
  let body: string | undefined;
  if (options.auth) headers.authorization = options.auth;
  if (options.form) {
    headers["content-type"] = "application/x-www-form-urlencoded";
    body = new URLSearchParams(options.form).toString();
  } else if (options.body !== undefined) {
    headers["content-type"] = "application/json";
    body = JSON.stringify(options.body);
  }
  let response: Response;
  try {
    const base = parley.via?.base ?? parley.base;
    response = await fetch(`${base}${path}`, { method, headers, body, signal: AbortSignal.timeout(15_000) });
  } catch (error) {
    throw new Error(`${method} ${path}: ${(error as Error).message}\n--- Parley said:\n${parley.tail()}`);
  }
  const text = await response.text();
  const found = parley.via?.violations(response.headers) ?? [];
  if (found.length > 0) {
    throw new Error(
      `${method} ${path}: ${response.status} breaks Parley's OpenAPI description, as Prism's proxy reads it:\n  ` +
        `${found.join("\n  ")}\n--- the answer: ${text.slice(0, 300)}`,
    );
  }
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {}
  return { status: response.status, body: parsed };
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .sort((a, b) => a.name.localeCompare(b.name))
    .flatMap((entry) => (entry.isDirectory() ? filesUnder(join(dir, entry.name)) : [join(dir, entry.name)]));
}

/**
 * A migrated embedded database, made once per checkout and set of migrations and copied into each
 * new data folder: a fresh PGlite runs initdb and every migration, seconds of CPU per start.
 * Parley still runs its migrations (none left) and makes its first account as on any first start;
 * test/supervisor.test.ts starts on an empty folder, so a start without a copy stays covered.
 */
function pgliteTemplate(): Promise<string> {
  const hash = new Bun.CryptoHasher("sha256");
  const inputs = [join(ROOT, "src/db/client.ts"), join(ROOT, "node_modules/@electric-sql/pglite/package.json")];
  for (const file of [...filesUnder(join(ROOT, "drizzle")), ...inputs]) hash.update(readFileSync(file));
  return madeOnce(`parley-pglite-${hash.digest("hex").slice(0, 16)}`, async (building) => {
    const env: Record<string, string> = { ...(process.env as Record<string, string>), DATA_DIR: building };
    delete env.DATABASE_URL;
    const entry = join(ROOT, "src/db/migrate.ts");
    const child = Bun.spawn([process.execPath, entry], { cwd: ROOT, env, stdout: "ignore", stderr: "pipe" });
    const [said, code] = await Promise.all([new Response(child.stderr).text(), child.exited]);
    if (code !== 0) throw new Error(`migrating a template embedded database failed (${code}):\n${said}`);
  });
}

/**
 * Fills a data folder with a migrated embedded database, as a first start leaves it, for a
 * test about something else than that first start (a lock, a command on an existing folder).
 */
export async function migratedDataDir(dataDir: string): Promise<void> {
  cpSync(await pgliteTemplate(), dataDir, { recursive: true });
}

/** Starts before giving up on ports another process took: free ports are picked before Parley binds them. */
const BIND_ATTEMPTS = 3;

/**
 * Parley started and ready: /readyz answers 200. A start refused because a port was taken (one
 * another test file took between freePort and the bind, test files running in parallel), before
 * or at the bind, is made again on fresh ports.
 */
export async function startParley(options: ParleyOptions): Promise<Parley> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await (await spawnParley(options)).ready();
    } catch (error) {
      if (attempt >= BIND_ATTEMPTS || !(error as Error).message.includes("A Parley listens on each of these"))
        throw error;
    }
  }
}

/**
 * Parley started, not yet waited for: `ready` waits (bounded) until /readyz answers 200, and on
 * time-out or exit fails with what it said. For a test that does something else meanwhile.
 */
export async function spawnParley(options: ParleyOptions): Promise<{ parley: Parley; ready(): Promise<Parley> }> {
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), "parley-e2e-"));
  if (options.embedded && !existsSync(join(dataDir, "PG_VERSION"))) {
    cpSync(await pgliteTemplate(), dataDir, { recursive: true });
  }
  const port = await freePort();
  const sipPort = await freePort();
  const metricsPort = await freePort();
  const inherited = options.asReader
    ? { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: dataDir, REDIS_URL: process.env.REDIS_URL! }
    : (process.env as Record<string, string>);
  const env: Record<string, string> = {
    ...inherited,
    PORT: String(port),
    METRICS_PORT: String(metricsPort),
    HOST: "127.0.0.1",
    PUBLIC_URL: `http://127.0.0.1:${port}`,
    DATA_DIR: dataDir,
    API_PROCESSES: "1",
    SIP_BIND_ADDRESS: "127.0.0.1",
    SIP_UDP_PORT: String(sipPort),
    SIP_TCP_PORT: String(sipPort),
    // Every request logged: on a hang, the tail shows the last ones and what was waiting.
    LOG_LEVEL: "info",
    // Its own key prefix: its workers must not take jobs of other test processes, nor they its.
    REDIS_PREFIX: `parley-test-e2e-${crypto.randomUUID()}`,
    ...options.env,
  };
  if (options.embedded) delete env.DATABASE_URL;
  const output: string[] = [];
  const child = Bun.spawn([process.execPath, ENTRY], {
    cwd: ROOT,
    env,
    stdout: "pipe",
    stderr: "pipe",
    stdin: "ignore",
  });
  collect(child.stdout, output);
  collect(child.stderr, output);

  const parley: Parley = {
    base: `http://127.0.0.1:${port}`,
    ws: `ws://127.0.0.1:${port}`,
    port,
    metrics: `http://127.0.0.1:${metricsPort}/metrics`,
    sipPort,
    dataDir,
    env,
    process: child,
    tail: (lines = 40) => output.join("").split("\n").slice(-lines).join("\n"),
    async admin(...args) {
      const cli = Bun.spawn([process.execPath, join(ROOT, "src/parley.ts"), ...args], {
        cwd: ROOT,
        env,
        stdout: "pipe",
        stderr: "pipe",
        stdin: "ignore",
      });
      const killer = setTimeout(() => cli.kill("SIGKILL"), 30_000);
      const [stdout, stderr, code] = await Promise.all([
        new Response(cli.stdout).text(),
        new Response(cli.stderr).text(),
        cli.exited,
      ]);
      clearTimeout(killer);
      return { code, stdout, stderr };
    },
    async stop(signal, withinMs) {
      child.kill(signal);
      return Promise.race([child.exited, Bun.sleep(withinMs).then(() => "still running" as const)]);
    },
    async firstApiKey() {
      const file = join(dataDir, "first-api-key");
      await until(() => existsSync(file), Boolean, 5_000);
      return readFileSync(file, "utf8").trim();
    },
    async close() {
      if ((await parley.stop("SIGTERM", 10_000)) === "still running") child.kill("SIGKILL");
      const redis = new Redis(env.REDIS_URL!, { maxRetriesPerRequest: 1 });
      const keys = await redis.keys(`${env.REDIS_PREFIX}:*`);
      if (keys.length > 0) await redis.del(...keys);
      await redis.quit();
      parley.cleanup();
    },
    cleanup() {
      child.kill("SIGKILL");
      void parley.via?.stop();
      if (!options.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
  // PGlite's first start (initdb and migrations) takes several seconds on a busy machine.
  const deadline = Date.now() + 60_000;
  const ready = async () => {
    for (;;) {
      const ready = await fetch(`${parley.base}/readyz`, { signal: AbortSignal.timeout(2_000) }).then(
        (response) => response.ok,
        () => false,
      );
      if (ready) break;
      if (child.exitCode !== null || Date.now() > deadline) {
        const why =
          child.exitCode !== null ? `Parley exited with ${child.exitCode}` : "Parley was not ready within 60 s";
        await Bun.sleep(200);
        const said = parley.tail();
        parley.cleanup();
        throw new Error(`${why}\n--- Parley said:\n${said}`);
      }
      await Bun.sleep(200);
    }
    return parley;
  };
  return { parley, ready };
}
