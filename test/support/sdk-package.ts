/**
 * @parley/server-sdk as a user gets it: `npm run build:sdk` (from the committed types), `npm pack ./dist/sdk` (a bare `dist/sdk` is read by npm as a GitHub repository), and
 * `npm install <tarball>` into a temporary folder. Built once per test run.
 */
import { mkdtempSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "../..");

function run(command: string[], cwd: string, what: string): string {
  const done = Bun.spawnSync(command, { cwd, stdout: "pipe", stderr: "pipe", env: { ...process.env, LOG_LEVEL: "silent" } });
  if (done.exitCode !== 0) throw new Error(`${what} failed (${done.exitCode}):\n${done.stdout.toString()}\n${done.stderr.toString()}`);
  return done.stdout.toString();
}

let packed: Promise<string> | undefined;

/** The tarball `npm pack ./dist/sdk` (a bare `dist/sdk` is read by npm as a GitHub repository) makes after a fresh build. */
export function sdkTarball(): Promise<string> {
  packed ??= (async () => {
    run([process.execPath, ".ci/sdk/build.ts", "--keep-types"], ROOT, "npm run build:sdk -- --keep-types");
    const into = mkdtempSync(join(tmpdir(), "parley-sdk-pack-"));
    run(["npm", "pack", "./dist/sdk", "--pack-destination", into, "--loglevel=error"], ROOT, "npm pack ./dist/sdk");
    const tarball = readdirSync(into).find((name) => name.endsWith(".tgz"));
    if (!tarball) throw new Error("npm pack made no tarball");
    return join(into, tarball);
  })();
  return packed;
}

/** A new folder with the packed SDK installed from its tarball, as an app would have it. */
export async function installedSdk(): Promise<string> {
  const tarball = await sdkTarball();
  const folder = mkdtempSync(join(tmpdir(), "parley-sdk-app-"));
  writeFileSync(join(folder, "package.json"), JSON.stringify({ name: "sdk-app", private: true, type: "module" }));
  run(["npm", "install", tarball, "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"], folder, "npm install <tarball>");
  return folder;
}

/** PATH for a machine with Node and npm and no Bun: the system folders only. */
export const NODE_ONLY_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
