/**
 * `parley load-test` as an operator runs it: `bun src/parley.ts load-test` against a Parley
 * started as a user starts it, by URL and the first account's API key. Its parts must all
 * have run (LL-HLS needs a live stream, which only a media server makes: it is reported as
 * skipped), the default objectives met, an impossible objective missed with exit code 5, and
 * what it created gone afterwards.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join, resolve } from "node:path";
import { http, type Parley, startParley } from "../support/parley";

const ROOT = resolve(import.meta.dir, "../..");
let parley: Parley;
let key: string;

beforeAll(async () => {
  parley = await startParley({ embedded: false, env: { BOOTSTRAP_ACCOUNT: "true" } });
  key = await parley.firstApiKey();
});

afterAll(async () => {
  await parley?.close();
});

async function loadTest(...args: string[]) {
  const child = Bun.spawn(
    [process.execPath, join(ROOT, "src/parley.ts"), "load-test", "--url", parley.base, "--key", key, ...args],
    { cwd: ROOT, stdout: "pipe", stderr: "pipe", stdin: "ignore", env: { ...process.env, PARLEY_URL: "" } },
  );
  const killer = setTimeout(() => child.kill("SIGKILL"), 20_000);
  const [stdout, stderr, code] = await Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
    child.exited,
  ]);
  clearTimeout(killer);
  return { stdout, stderr, code };
}

describe("parley load-test", () => {
  test("every part runs against a running Parley, passes, and leaves nothing behind", async () => {
    // The latency objectives are what a test on a shared, busy machine can hold: errors keep their default.
    const generous = ["token", "chat", "events", "webhooks"].flatMap((part) => ["--objective", `${part}.p99<10s`]);
    const run = await loadTest("--duration", "3s", "--json", "--receivers", "4", ...generous);
    if (run.code !== 0) throw new Error(`exit ${run.code}\n${run.stdout}\n${run.stderr}\n${parley.tail()}`);
    const result = JSON.parse(run.stdout);
    expect(result.pass).toBe(true);
    for (const part of ["token", "chat", "events", "webhooks"]) {
      expect({ part, status: result.parts[part].status }).toEqual({ part, status: "ran" });
      expect(result.parts[part].operations).toBeGreaterThan(0);
      expect(result.parts[part].p99_ms).toBeGreaterThan(0);
    }
    // Four receivers each hear every message.
    expect(result.parts.chat.operations % 4).toBe(0);
    expect(result.parts.llhls.status).toBe("skipped");
    expect(result.parts.llhls.reason).toContain("--stream");
    const judged = result.objectives.map((entry: { objective: string; part: string }) => entry.objective);
    expect(judged.filter((objective: string) => objective === "*.errors<1%")).toHaveLength(4);
    expect(judged).toContain("token.p99<10s");
    expect(judged).not.toContain("token.p99<250ms");
    // The progress line, once a second, on stderr.
    expect(run.stderr).toMatch(/load-test \d+s\/3s {2}token \d+\/0e/);

    const hooks = await http(parley, "GET", "/api/v1/webhooks/", { auth: `Bearer ${key}` });
    expect(hooks.body.endpoints).toEqual([]);
    const token = await http(parley, "POST", "/api/v1/misc/generate-token", {
      auth: `Bearer ${key}`,
      body: { user: { id: "checker" }, scope: "messaging" },
    });
    const messages = await http(parley, "GET", `/api/v1/messaging/rooms/${result.id}/messages`, {
      auth: `Bearer ${token.body.token}`,
    });
    expect(messages.status).toBe(200);
    expect(messages.body.messages).toEqual([]);
  }, 30_000);

  test("a missed objective exits 5 and says which; a refused sink is skipped with Parley's reason", async () => {
    const run = await loadTest(
      ...["--duration", "1s", "--objective", "token.p99<0.001ms", "--rate", "chat=0"],
      ...["--sink-url", "ftp://sink.loadtest.invalid/hook"],
    );
    expect(run.code).toBe(5);
    expect(run.stdout).toContain("MISSED  token.p99<0.001ms");
    expect(run.stdout).toContain("chat      skipped: --rate chat=0");
    expect(run.stdout).toMatch(
      /webhooks {2}skipped: Parley refused the endpoint ftp:\/\/sink\.loadtest\.invalid\/hook: .+/,
    );
    expect(run.stdout).toMatch(/events +\d+ +0 /);
    expect(run.stdout).toMatch(/FAIL$/m);
  }, 30_000);

  test("Ctrl-C ends the load early and still removes what it made", async () => {
    const child = Bun.spawn(
      [
        process.execPath,
        join(ROOT, "src/parley.ts"),
        "load-test",
        "--url",
        parley.base,
        "--key",
        key,
        "--json",
        "--objective",
        "*.p99<10s",
      ],
      { cwd: ROOT, stdout: "pipe", stderr: "pipe", stdin: "ignore" },
    );
    const killer = setTimeout(() => child.kill("SIGKILL"), 20_000);
    // Interrupted once the load is under way: after its first progress line.
    const reader = child.stderr.getReader();
    let said = "";
    while (!said.includes("load-test 1s/60s")) {
      const { value, done } = await reader.read();
      if (done) break;
      said += new TextDecoder().decode(value);
    }
    child.kill("SIGINT");
    const [stdout, code] = await Promise.all([new Response(child.stdout).text(), child.exited]);
    clearTimeout(killer);
    const result = JSON.parse(stdout);
    expect(code).toBe(0);
    expect(result.duration_s).toBeLessThan(10);
    expect(result.parts.webhooks.status).toBe("ran");
    const hooks = await http(parley, "GET", "/api/v1/webhooks/", { auth: `Bearer ${key}` });
    expect(hooks.body.endpoints).toEqual([]);
  }, 30_000);

  test("a refused key exits 3 and a bad objective 2, before any load", async () => {
    const refused = await Bun.spawn(
      [process.execPath, join(ROOT, "src/parley.ts"), "load-test", "--url", parley.base, "--key", "pk_nope"],
      { cwd: ROOT, stdout: "pipe", stderr: "pipe", stdin: "ignore" },
    ).exited;
    expect(refused).toBe(3);
    const bad = await loadTest("--objective", "token.p99<fast");
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--objective is part.metric<value");
  }, 30_000);
});
