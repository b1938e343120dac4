/**
 * The console's secret, generated on first use into the data folder when CONSOLE_SECRET is unset:
 * every API process of a node must end up with the same whole secret, also when they start together.
 */
import { expect, test } from "bun:test";
import { mkdtempSync, readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const sessions = join(import.meta.dir, "../../src/modules/console/sessions.ts");

/** The secret a new process takes from the data folder. */
async function secretOf(dataDir: string): Promise<string> {
  const { CONSOLE_SECRET: _unset, ...env } = process.env;
  const child = Bun.spawn(
    [
      process.execPath,
      "-e",
      `const { consoleSecret } = await import(${JSON.stringify(sessions)});` +
        "console.log(JSON.stringify(consoleSecret())); process.exit(0);",
    ],
    { cwd: join(import.meta.dir, "../.."), env: { ...env, DATA_DIR: dataDir }, stdout: "pipe", stderr: "pipe" },
  );
  const [out, code] = await Promise.all([new Response(child.stdout).text(), child.exited]);
  if (code !== 0) throw new Error(`exited ${code}: ${await new Response(child.stderr).text()}`);
  return JSON.parse(out) as string;
}

test("processes starting together all take the same whole secret", async () => {
  const dataDir = mkdtempSync(join(tmpdir(), "parley-secret-"));
  const secrets = await Promise.all(Array.from({ length: 6 }, () => secretOf(dataDir)));
  expect(secrets[0]!.length).toBeGreaterThanOrEqual(40);
  expect(new Set(secrets).size).toBe(1);
  expect(readFileSync(join(dataDir, "console-secret"), "utf8")).toBe(secrets[0]!);
  expect(statSync(join(dataDir, "console-secret")).mode & 0o777).toBe(0o600);
  // Nothing of the drafts is left behind.
  expect(readdirSync(dataDir)).toEqual(["console-secret"]);
});

test("a secret file left empty (a write cut short) is replaced, not taken as the secret", async () => {
  const dataDir = mkdtempSync(join(tmpdir(), "parley-secret-"));
  writeFileSync(join(dataDir, "console-secret"), "", { mode: 0o600 });
  const secret = await secretOf(dataDir);
  expect(secret.length).toBeGreaterThanOrEqual(40);
  expect(readFileSync(join(dataDir, "console-secret"), "utf8")).toBe(secret);
  expect(await secretOf(dataDir)).toBe(secret);
});
