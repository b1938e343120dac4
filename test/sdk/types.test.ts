/**
 * The SDK stays true to the server: its generated types are what openapi-typescript makes of
 * the app's OpenAPI description now, its error codes and event types are the server's lists,
 * and its runtime (the package's code and its dependencies, as a browser bundle) stays under
 * 20 KB gzipped.
 */
import { expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { CODES_FILE, generateCodes, generateTypes, TYPES_FILE } from "../../.ci/sdk/generate-types";
import { sdkBuild } from "../support/sdk-package";

const ROOT = resolve(import.meta.dir, "../..");

test("src/sdk/generated/openapi.ts is what the running app describes (npm run sdk:types writes it)", async () => {
  expect(readFileSync(TYPES_FILE, "utf8") === (await generateTypes())).toBe(true);
}, 60_000);

test("building the SDK and writing its types open no database: both work while a Parley holds the embedded one", () => {
  const work = mkdtempSync(join(tmpdir(), "parley-sdk-build-"));
  try {
    // The lock a running Parley holds on its data folder (src/db/client.ts): this process, alive.
    const data = join(work, "data");
    mkdirSync(data);
    const stat = readFileSync(`/proc/${process.pid}/stat`, "utf8");
    const startedAt = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
    writeFileSync(join(data, "parley.pid"), `${process.pid} ${startedAt}`);
    const env = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: work, DATA_DIR: data };
    const build = Bun.spawnSync(["npm", "run", "build:sdk", "--", "--out", join(work, "sdk")], {
      cwd: ROOT,
      env,
      stdout: "pipe",
      stderr: "pipe",
    });
    expect({ code: build.exitCode, said: build.stderr.toString() }).toEqual({ code: 0, said: "" });
    expect(build.stdout.toString()).toContain("@parley/server-sdk");
    const check = Bun.spawnSync(["npm", "run", "sdk:types", "--", "--check"], { cwd: ROOT, env, stderr: "pipe" });
    expect({ code: check.exitCode, said: check.stderr.toString() }).toEqual({ code: 0, said: "" });
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}, 120_000);

test("src/sdk/generated/codes.ts holds the error codes and event types the server has (sdk:types)", async () => {
  expect(readFileSync(CODES_FILE, "utf8") === (await generateCodes())).toBe(true);
});

test("the generated lists are the ones the server answers with", async () => {
  const { ERROR_STATUS } = await import("../../src/http/errors");
  const { EVENT_TYPES } = await import("../../src/modules/catalogue/event-types");
  const { PARLEY_ERROR_CODES, PARLEY_EVENT_TYPES } = await import("../../src/sdk/index");
  expect(Object.keys(ERROR_STATUS).sort()).toEqual([...PARLEY_ERROR_CODES].sort());
  expect([...PARLEY_EVENT_TYPES]).toEqual(EVENT_TYPES);
});

test("the SDK's runtime, bundled for a browser with its dependencies, is under 20 KB gzipped", async () => {
  const { folder } = await sdkBuild();
  const bundle = await Bun.build({ entrypoints: [join(folder, "index.js")], target: "browser", minify: true });
  expect(bundle.success).toBe(true);
  const code = await bundle.outputs[0]!.text();
  const gzipped = Bun.gzipSync(new TextEncoder().encode(code)).length;
  console.log(`sdk runtime: ${code.length} bytes minified, ${gzipped} bytes gzipped`);
  expect(gzipped).toBeLessThan(20 * 1024);
}, 180_000);
