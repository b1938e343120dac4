/**
 * `npm run build:sdk`: the installable package @parley/server-sdk in dist/sdk. src/sdk is
 * compiled by the repository's TypeScript into ESM with declarations, with the committed types
 * of the API (src/sdk/generated/openapi.ts, which test/sdk/types.test.ts holds to what the app
 * describes; `npm run sdk:types` writes them again after a route changes), and the package's
 * manifest written with its three runtime dependencies at the versions the repository tests them
 * with. So a build needs neither the database nor the generator's own tools, and works beside a
 * running Parley. `npm pack ./dist/sdk --pack-destination dist` makes the tarball.
 */
import { chmodSync, cpSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "../..");
// --out <folder> builds elsewhere: the tests build their own copy, so that two at once never share one.
const outAt = process.argv.indexOf("--out");
const OUT = outAt === -1 ? join(ROOT, "dist/sdk") : resolve(process.argv[outAt + 1] ?? "");
/**
 * The SDK's runtime dependencies: typed fetch over the generated types, the Standard Webhooks
 * verifier, and the Phoenix client that `parley load-test` holds chat sockets with.
 */
const RUNTIME_DEPENDENCIES = ["openapi-fetch", "standardwebhooks", "phoenix"];

function run(command: string[], cwd = ROOT): void {
  const done = Bun.spawnSync(command, { cwd, stdout: "inherit", stderr: "inherit", env: { ...process.env, LOG_LEVEL: "silent" } });
  if (done.exitCode !== 0) {
    console.error(`build:sdk: ${command.join(" ")} failed`);
    process.exit(1);
  }
}

console.log(`build:sdk: compiling src/sdk into ${OUT}`);
rmSync(OUT, { recursive: true, force: true });
run([join(ROOT, "node_modules/.bin/tsc"), "-p", join(ROOT, "src/sdk/tsconfig.json"), "--outDir", OUT]);
chmodSync(join(OUT, "bin.js"), 0o755);

const root = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"));
const ranges = { ...root.dependencies, ...root.devDependencies };
const manifest = {
  name: "@parley/server-sdk",
  version: root.version,
  description: "Typed client of Parley's HTTP API, webhook verification, and the parley command line",
  type: "module",
  exports: { ".": { types: "./index.d.ts", default: "./index.js" } },
  types: "./index.d.ts",
  bin: { parley: "./bin.js" },
  engines: { node: ">=20" },
  sideEffects: false,
  dependencies: Object.fromEntries(RUNTIME_DEPENDENCIES.map((name) => [name, ranges[name]])),
};
writeFileSync(join(OUT, "package.json"), `${JSON.stringify(manifest, null, 2)}\n`);
cpSync(join(ROOT, "docs/sdk.md"), join(OUT, "README.md"));
console.log(`build:sdk: ${manifest.name}@${manifest.version} in ${OUT}`);
