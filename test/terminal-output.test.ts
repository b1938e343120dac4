/**
 * What a person sees when Parley starts: in a terminal, readable lines and a banner with
 * where to go; piped, JSON lines with the same addresses in one of them. Health checks are
 * logged at debug, so an orchestrator's probes do not drown the rest.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { http, migratedDataDir, type Parley, startParley, within } from "./support/parley";
import { freePort } from "./support/ports";
import { childPids, until } from "./support/wait";

const entry = new URL("../src/index.ts", import.meta.url).pathname;

for (const mode of [
  { name: "the embedded database", embedded: true },
  { name: "PostgreSQL", embedded: false },
]) {
  describe(`piped output, on ${mode.name}`, () => {
    let parley: Parley | undefined;

    afterAll(async () => {
      await parley?.close();
    });

    test("JSON lines only, one of them with the addresses; health checks not at info", async () => {
      parley = await startParley({
        embedded: mode.embedded,
        env: { SIP_ENABLED: "false", BOOTSTRAP_ACCOUNT: String(mode.embedded) },
      });
      const ready = await within(parley, "the ready line", 30_000, async () =>
        parley!
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
        const lines = parley!
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
