/**
 * Parley as an operator starts it, on the embedded database and on PostgreSQL (a pool of two
 * API processes sharing the port): what it writes when piped (JSON lines, one of them with
 * where to go; health checks logged at debug, so an orchestrator's probes do not drown the
 * rest), its Prometheus metrics on METRICS_HOST:METRICS_PORT and not on the public port (a
 * scrape counts the whole pool), one Parley per port (a second one is refused, naming the
 * process that holds it), and a Parley killed outright does not keep the next start from the
 * port. In a terminal, readable lines and a banner.
 *
 * Each database's tests go on with the one Parley its first test starts, the kill last: a start
 * of their own proved nothing more, and cost seconds of CPU each (PGlite, or the pool's processes).
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { http, migratedDataDir, type Parley, startParley, within } from "./support/parley";
import { freePort } from "./support/ports";
import { childPids, until } from "./support/wait";

const entry = new URL("../src/index.ts", import.meta.url).pathname;

const fresh = (url: string) => fetch(url, { keepalive: false });

/** Parley started by hand with the first one's settings and these changes; its exit code and what it said. */
async function startAnother(first: Parley, changes: Record<string, string>, withinMs = 30_000) {
  const child = Bun.spawn([process.execPath, entry], {
    env: { ...first.env, ...changes },
    stdout: "pipe",
    stderr: "pipe",
    stdin: "ignore",
  });
  const killer = setTimeout(() => child.kill("SIGKILL"), withinMs);
  const [stdout, stderr, code] = await Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
    child.exited,
  ]);
  clearTimeout(killer);
  return { code, said: stdout + stderr };
}

for (const mode of [
  { name: "the embedded database", embedded: true, processes: "1" },
  { name: "PostgreSQL", embedded: false, processes: "2" },
]) {
  describe(`started on ${mode.name}`, () => {
    let parley: Parley | undefined;
    const spare = mkdtempSync(join(tmpdir(), "parley-second-"));

    afterAll(async () => {
      await parley?.close();
      rmSync(spare, { recursive: true, force: true });
    });

    /** The Parley of this database, started by the first test that asks: the others run on when one failed. */
    async function started(): Promise<Parley> {
      parley ??= await startParley({
        embedded: mode.embedded,
        env: { SIP_ENABLED: "false", API_PROCESSES: mode.processes, BOOTSTRAP_ACCOUNT: String(mode.embedded) },
      });
      if (!mode.embedded) {
        // The pool itself shares the port: both API processes listen.
        await until(
          () => childPids(parley!.process.pid, "api").length,
          (count) => count === 2,
          15_000,
        );
      }
      return parley;
    }

    // First: the pool's count of /readyz is then the readiness checks' and these 20 requests' alone.
    test("the public port answers 404 for /metrics; the metrics port serves the pool's counts", async () => {
      const parley = await started();
      const requests = 20;
      for (let i = 0; i < requests; i++) expect((await http(parley, "GET", "/readyz")).status).toBe(200);

      const hidden = await fresh(`${parley.base}/metrics`);
      expect(hidden.status).toBe(404);
      expect(await hidden.text()).not.toContain("parley_http_requests_total");

      // Each process publishes its counts every 5 s; a scrape on any of them merges them all.
      const counted = await until(
        async () => {
          const scrape = await fresh(parley.metrics);
          const text = await scrape.text();
          return {
            status: scrape.status,
            type: scrape.headers.get("content-type"),
            text,
            count: Number(
              /parley_http_requests_total\{method="GET",route="\/readyz",status="200"\} (\d+)/.exec(text)?.[1] ?? 0,
            ),
          };
        },
        (scrape) => scrape.count >= requests,
        20_000,
        250,
      );
      expect(counted.status).toBe(200);
      expect(counted.type).toContain("text/plain; version=0.0.4");
      expect(counted.text).toMatch(/parley_queue_jobs\{queue="recorder",state="waiting"\} \d+/);
      expect((await fresh(parley.metrics.replace("/metrics", "/healthz"))).status).toBe(404);
    }, 90_000);

    test("publish/subscribe: an embedded Parley keeps it to its one process; a pool rings over Redis", async () => {
      const parley = await started();
      const prefix = parley.env.REDIS_PREFIX!;
      const redis = new Redis(parley.env.REDIS_URL!, { maxRetriesPerRequest: 1 });
      try {
        // The channels under this Parley's prefix that something subscribes to, as Redis counts them.
        const subscribed = () => redis.call("PUBSUB", "CHANNELS", `${prefix}:*`) as Promise<string[]>;
        if (mode.embedded) {
          expect(await subscribed()).toEqual([]);
          return;
        }
        const expected = ["outbox:cdr", "outbox:webhooks", "invalidate:accounts"].map((name) => `${prefix}:${name}`);
        const channels = await until(subscribed, (names) => expected.every((name) => names.includes(name)), 15_000);
        expect(channels).toEqual(expect.arrayContaining(expected));
      } finally {
        redis.disconnect();
      }
    });

    test("piped output: JSON lines only, one of them with the addresses; health checks not at info", async () => {
      const parley = await started();
      const ready = await within(parley, "the ready line", 30_000, async () =>
        parley
          .tail(400)
          .split("\n")
          .find((line) => line.includes('"msg":"parley ready"')),
      );
      const base = parley.base;
      expect(JSON.parse(ready)).toMatchObject({
        level: 30,
        api: base,
        console: `${base}/console`,
        swagger: `${base}/swagger`,
        metrics: parley.metrics,
        ...(mode.embedded ? { firstApiKey: join(parley.dataDir, "first-api-key") } : {}),
      });
      for (let i = 0; i < 3; i++) {
        expect((await http(parley, "GET", "/healthz")).status).toBe(200);
        expect((await http(parley, "GET", "/readyz")).status).toBe(200);
      }
      expect((await http(parley, "POST", "/api/v1/misc/generate-token", { body: {} })).status).toBe(401);
      const requests = await within(parley, "the token request's log line", 10_000, async () => {
        const lines = parley
          .tail(400)
          .split("\n")
          .filter((line) => line.includes('"msg":"request"'));
        return lines.some((line) => line.includes('"route":"/api/v1/misc/generate-token"')) ? lines : undefined;
      });
      expect(requests.filter((line) => /"route":"\/(healthz|readyz)"/.test(line))).toEqual([]);
      const lines = parley
        .tail(400)
        .split("\n")
        .filter((line) => line.trim() !== "");
      expect(lines.filter((line) => !line.startsWith("{"))).toEqual([]);
    }, 90_000);

    test("a second Parley on the port is refused, naming the first one's process and data", async () => {
      const first = await started();
      const second = await startAnother(first, {
        DATA_DIR: spare,
        REDIS_PREFIX: `parley-test-second-${crypto.randomUUID()}`,
      });
      expect(second.code).toBe(1);
      const store = mode.embedded
        ? `data folder ${first.dataDir}`
        : `database ${new URL(first.env.DATABASE_URL!).host}${new URL(first.env.DATABASE_URL!).pathname}`;
      expect(second.said).toContain(`parley: port ${first.port} is already in use, held by pid ${first.process.pid} (`);
      expect(second.said).toContain(`src/index.ts; in `);
      expect(second.said).toContain(store);
      expect(second.said).toContain("start this Parley with another PORT");
      // Refused before it opened anything: its data folder is untouched.
      expect(readdirSync(spare)).toEqual([]);
      expect((await fresh(`${first.base}/readyz`)).status).toBe(200);
    }, 90_000);

    test("another PORT and DATA_DIR, SIP and metrics ports taken: every port named, nothing left", async () => {
      const first = await started();
      // A program of another kind on the SIP port over UDP; the metrics port is the first Parley's.
      const sipHolder = await Bun.udpSocket({ hostname: "127.0.0.1", port: 0 });
      const folder = mkdtempSync(join(tmpdir(), "parley-third-"));
      try {
        const metricsPort = new URL(first.metrics).port;
        const second = await startAnother(first, {
          PORT: String(await freePort()),
          DATA_DIR: folder,
          SIP_ENABLED: "true",
          SIP_UDP_PORT: String(sipHolder.port),
          SIP_TCP_PORT: String(await freePort()),
          REDIS_PREFIX: `parley-test-third-${crypto.randomUUID()}`,
        });
        expect(second.code).toBe(1);
        const row = (setting: string) => second.said.split("\n").find((line) => line.trim().startsWith(`${setting}=`));
        for (const setting of ["PORT", "SIP_UDP_PORT", "SIP_TCP_PORT", "SIP_TLS_PORT", "METRICS_PORT"])
          expect(row(setting)).toBeDefined();
        expect(row("SIP_UDP_PORT")).toContain(`127.0.0.1:${sipHolder.port}/udp  <- in use`);
        expect(row("METRICS_PORT")).toContain(`:${metricsPort}/tcp  <- in use, held by pid ${first.process.pid}`);
        expect(row("PORT")).not.toContain("<-");
        expect(row("SIP_TLS_PORT")).toContain("off (0)");
        expect(second.said).not.toMatch(/FATAL|uncaught|\n\s+at /);
        // Refused before it started or opened anything: no socket, pid file, private Redis or database.
        expect(readdirSync(folder)).toEqual([]);
      } finally {
        sipHolder.close();
        rmSync(folder, { recursive: true, force: true });
      }
    }, 90_000);

    test("two of its own listeners on one port: refused before anything listens, the second named", async () => {
      const first = await started();
      const folder = mkdtempSync(join(tmpdir(), "parley-fourth-"));
      try {
        const port = String(await freePort());
        const second = await startAnother(first, {
          PORT: port,
          METRICS_PORT: String(await freePort()),
          DATA_DIR: folder,
          SIP_ENABLED: "true",
          SIP_UDP_PORT: port,
          SIP_TCP_PORT: port,
          REDIS_PREFIX: `parley-test-fourth-${crypto.randomUUID()}`,
        });
        expect(second.code).toBe(1);
        expect(second.said).toContain(`cannot listen on 127.0.0.1:${port}/tcp (SIP_TCP_PORT): PORT listens there too.`);
        const row = (setting: string) => second.said.split("\n").find((line) => line.trim().startsWith(`${setting}=`));
        expect(row("SIP_TCP_PORT")).toContain("<- PORT listens there too");
        // One port over UDP and over TCP is two sockets.
        expect(row("SIP_UDP_PORT")).not.toContain("<-");
        expect(second.said).not.toContain("api listening");
        expect(readdirSync(folder)).toEqual([]);
      } finally {
        rmSync(folder, { recursive: true, force: true });
      }
    }, 90_000);

    // Last, on the embedded Parley that has just refused a second one.
    if (mode.embedded)
      test("a Parley killed outright does not keep the next start on its port and folder from serving", async () => {
        const killed = await started();
        expect(await killed.stop("SIGKILL", 5_000)).not.toBe("still running");
        const again = Bun.spawn([process.execPath, entry], {
          env: killed.env,
          stdout: "ignore",
          stderr: "ignore",
          stdin: "ignore",
        });
        try {
          const ready = await until(
            () =>
              fetch(`${killed.base}/readyz`, { keepalive: false }).then(
                (response) => response.status,
                () => 0,
              ),
            (status) => status === 200,
            60_000,
          );
          expect(ready).toBe(200);
        } finally {
          again.kill("SIGTERM");
          await again.exited;
        }
      }, 90_000);
  });
}

describe("in a terminal", () => {
  const dir = mkdtempSync(join(tmpdir(), "parley-terminal-"));
  let terminal: ReturnType<typeof Bun.spawn> | undefined;

  afterAll(async () => {
    if (terminal) {
      for (const pid of childPids(terminal.pid)) process.kill(pid, "SIGTERM");
      await Promise.race([terminal.exited, Bun.sleep(15_000)]);
      terminal.kill("SIGKILL");
    }
    rmSync(dir, { recursive: true, force: true });
  });

  test("readable lines and a banner with the API, console and API docs addresses and the API key's file", async () => {
    const port = await freePort();
    const metricsPort = await freePort();
    const env: Record<string, string> = {
      ...(process.env as Record<string, string>),
      PORT: String(port),
      METRICS_PORT: String(metricsPort),
      HOST: "127.0.0.1",
      SIP_ENABLED: "false",
      BOOTSTRAP_ACCOUNT: "true",
      LOG_LEVEL: "info",
      REDIS_PREFIX: `parley-test-terminal-${crypto.randomUUID()}`,
    };
    delete env.DATABASE_URL;
    // Its ./data as a first start leaves it, migrated (the output is the subject here, not PGlite's initdb).
    await migratedDataDir(join(dir, "data"));
    // util-linux `script` gives Parley a pseudo-terminal as its stdout, as a shell would.
    terminal = Bun.spawn(["script", "-qfec", `exec ${process.execPath} ${entry}`, "/dev/null"], {
      cwd: dir,
      env,
      stdout: "pipe",
      stderr: "pipe",
      stdin: "pipe",
    });
    let output = "";
    const decoder = new TextDecoder();
    (async () => {
      for await (const chunk of terminal!.stdout as ReadableStream<Uint8Array>)
        output += decoder.decode(chunk, { stream: true });
    })().catch(() => {});
    await until(
      () => output,
      (text) => text.includes("Metrics "),
      60_000,
      100,
    );
    // Colours off (ESC [ … m), and the terminal's carriage returns.
    const plain = output.replace(new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`, "g"), "").replaceAll("\r", "");
    const base = `http://localhost:${port}`;
    expect(plain).toContain("Parley is ready");
    expect(plain).toMatch(new RegExp(`API +${base}\\n`));
    expect(plain).toMatch(new RegExp(`Console +${base}/console\\n`));
    expect(plain).toMatch(new RegExp(`API docs +${base}/swagger\\n`));
    expect(plain).toContain("First API key in data/first-api-key\n");
    expect(plain).toContain(`Metrics      http://127.0.0.1:${metricsPort}/metrics\n`);
    // Readable lines, a clock time and the level in words, instead of JSON with epoch milliseconds.
    expect(plain).toMatch(/^\[\d{2}:\d{2}:\d{2}\.\d{3}\] INFO \(\d+\): api listening/m);
    expect(plain).not.toContain('{"level"');
  }, 90_000);
});
