/**
 * @parley/server-sdk as a user gets it: built as `npm run build:sdk` builds it (from the
 * committed types), packed by `npm pack`, and installed from the tarball into an app folder.
 * tsc, npm pack and npm install take seconds of CPU, and five test files want the same
 * package: each is made once per checkout and set of inputs (the SDK's sources, its build
 * script, the manifest's sources and the compiler), in node_modules/.cache, and reused until
 * one of them changes. The app folders a test gets are copies of the installed one.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { madeOnce } from "./made-once";

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
  /** The built package: what dist/sdk holds after `npm run build:sdk`. Shared: read, never written. */
  folder: string;
  tarball: string;
}

/** Everything the build reads: a change to any of them makes a new build. */
function buildInputs(): string[] {
  const sdk = join(ROOT, "src/sdk");
  const sources = readdirSync(sdk, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name));
  return [
    ...sources,
    join(ROOT, ".ci/sdk/build.ts"),
    join(ROOT, "package.json"),
    join(ROOT, "docs/sdk.md"),
    join(ROOT, "node_modules/typescript/package.json"),
    join(ROOT, "node_modules/@types/node/package.json"),
  ].sort();
}

/** A folder under node_modules/.cache named by the hash of the build's inputs, made by `make` if missing. */
function cached(kind: string, make: (into: string) => void): Promise<string> {
  const hash = new Bun.CryptoHasher("sha256");
  for (const file of buildInputs()) hash.update(file).update(readFileSync(file));
  return madeOnce(`parley-${kind}-${hash.digest("hex").slice(0, 16)}`, (building) => {
    mkdirSync(building);
    make(building);
  });
}

let built: Promise<SdkBuild> | undefined;

/** The package as `npm run build:sdk` builds it, and the tarball `npm pack` makes of it. */
export async function sdkBuild(): Promise<SdkBuild> {
  // Under node_modules/ rather than the system's temp folder: bundling the built package
  // resolves its dependencies from the repository's node_modules, as an app's would.
  built ??= (async () => {
    const into = await cached("sdk", (building) => {
      const folder = join(building, "sdk");
      run([process.execPath, ".ci/sdk/build.ts", "--out", folder], ROOT, "npm run build:sdk");
      run(["npm", "pack", folder, "--pack-destination", building, "--loglevel=error"], ROOT, "npm pack");
    });
    const tarball = readdirSync(into).find((name) => name.endsWith(".tgz"));
    if (!tarball) throw new Error(`npm pack made no tarball in ${into}`);
    return { folder: join(into, "sdk"), tarball: join(into, tarball) };
  })();
  return built;
}

/** A new folder with the packed SDK installed from its tarball, as an app would have it; the caller removes it. */
export async function installedSdk(): Promise<string> {
  const { tarball } = await sdkBuild();
  const installed = await cached("sdk-app", (building) => {
    writeFileSync(join(building, "package.json"), JSON.stringify({ name: "sdk-app", private: true, type: "module" }));
    run(
      ["npm", "install", tarball, "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"],
      building,
      "npm install <tarball>",
    );
  });
  const folder = mkdtempSync(join(tmpdir(), "parley-sdk-app-"));
  // cp -a keeps node_modules/.bin's relative links pointing into the copy, as npm made them.
  run(["cp", "-a", `${installed}/.`, folder], ROOT, "copying the installed app");
  return folder;
}

/** PATH for a machine with Node and npm and no Bun: the system folders only. */
export const NODE_ONLY_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
