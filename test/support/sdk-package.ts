/**
 * @parley/server-sdk as a user gets it: built as `npm run build:sdk` builds it (from the
 * committed types, into a folder of this test process's own), packed by `npm pack`, and
 * installed from the tarball into a temporary folder. Built once per test process.
 */
import { afterAll } from "bun:test";
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { isAlive } from "./wait";

const ROOT = resolve(import.meta.dir, "../..");

function run(command: string[], cwd: string, what: string): string {
  const done = Bun.spawnSync(command, {
    cwd,
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, LOG_LEVEL: "silent" },
  });
  if (done.exitCode !== 0)
    throw new Error(`${what} failed (${done.exitCode}):\n${done.stdout.toString()}\n${done.stderr.toString()}`);
  return done.stdout.toString();
}

export interface SdkBuild {
  /** The built package: what dist/sdk holds after `npm run build:sdk`. */
  folder: string;
  tarball: string;
}

let built: Promise<SdkBuild> | undefined;
let buildFolder: string | undefined;

// Registered as the first test file that imports this is loaded: the build goes when that
// file's tests are done, and a later file in the same process builds again.
afterAll(() => {
  if (buildFolder) rmSync(buildFolder, { recursive: true, force: true });
  buildFolder = undefined;
  built = undefined;
});

/** The package built into a folder of this test process's own, and the tarball `npm pack` makes of it. */
export function sdkBuild(): Promise<SdkBuild> {
  built ??= (async () => {
    // Under dist/ (ignored by git) rather than the system's temp folder: bundling the built
    // package resolves its dependencies from the repository's node_modules, as an app's would.
    const dist = join(ROOT, "dist");
    mkdirSync(dist, { recursive: true });
    // Builds of test processes that have ended (a later file's build outlives the cleanup below).
    for (const name of readdirSync(dist)) {
      const owner = /^test-(\d+)-/.exec(name)?.[1];
      if (owner && !isAlive(Number(owner))) rmSync(join(dist, name), { recursive: true, force: true });
    }
    const into = mkdtempSync(join(dist, `test-${process.pid}-`));
    buildFolder = into;
    const folder = join(into, "sdk");
    run(
      [process.execPath, ".ci/sdk/build.ts", "--keep-types", "--out", folder],
      ROOT,
      "npm run build:sdk -- --keep-types",
    );
    run(["npm", "pack", folder, "--pack-destination", into, "--loglevel=error"], ROOT, "npm pack");
    const tarball = readdirSync(into).find((name) => name.endsWith(".tgz"));
    if (!tarball) throw new Error("npm pack made no tarball");
    return { folder, tarball: join(into, tarball) };
  })();
  return built;
}

/** A new folder with the packed SDK installed from its tarball, as an app would have it. */
export async function installedSdk(): Promise<string> {
  const { tarball } = await sdkBuild();
  const folder = mkdtempSync(join(tmpdir(), "parley-sdk-app-"));
  writeFileSync(join(folder, "package.json"), JSON.stringify({ name: "sdk-app", private: true, type: "module" }));
  run(
    ["npm", "install", tarball, "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"],
    folder,
    "npm install <tarball>",
  );
  return folder;
}

/** PATH for a machine with Node and npm and no Bun: the system folders only. */
export const NODE_ONLY_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
