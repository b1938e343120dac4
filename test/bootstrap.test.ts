/**
 * The first `npm start` (.ci/bootstrap start) on a checkout without node_modules: it says that
 * it installs, and on a machine that cannot reach the npm registry it fails at once, naming the
 * registry and the reason, instead of waiting out npm's retries in silence.
 */
import { expect, test } from "bun:test";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { freePort } from "./support/ports";

const ROOT = resolve(import.meta.dir, "..");

test("the registry out of reach: the first start says it installs, then why it cannot, in seconds", async () => {
  const checkout = mkdtempSync(join(tmpdir(), "parley-bootstrap-"));
  try {
    mkdirSync(join(checkout, ".ci"));
    for (const file of [".ci/bootstrap", "package.json", "package-lock.json", ".npmrc"])
      copyFileSync(join(ROOT, file), join(checkout, file));
    // A registry address where nothing listens: what an offline machine meets, without a network to cut.
    const registry = `http://127.0.0.1:${await freePort()}/`;
    const started = Date.now();
    const run = Bun.spawn(["bash", ".ci/bootstrap", "start"], {
      cwd: checkout,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: checkout, npm_config_registry: registry },
      stdout: "pipe",
      stderr: "pipe",
    });
    const killer = setTimeout(() => run.kill("SIGKILL"), 60_000);
    const [said, code] = await Promise.all([new Response(run.stderr).text(), run.exited]);
    clearTimeout(killer);
    expect(code).toBe(1);
    expect(Date.now() - started).toBeLessThan(30_000);
    expect(said).toContain(`installing the npm packages of package-lock.json (bun among them) from ${registry};`);
    expect(said).toContain(`parley: the npm registry ${registry} cannot be reached (reason: connect ECONNREFUSED`);
    expect(said).toContain("npm config set registry");
  } finally {
    rmSync(checkout, { recursive: true, force: true });
  }
}, 90_000);
