/**
 * The packed SDK on Node 20 with no Bun on PATH, and on Deno, against Parley started as a
 * process on the embedded database: every route family through the installed package
 * (test/sdk/fixtures/drive-sdk.mjs).
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { copyFileSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { type Parley, startParley } from "../support/parley";
import { installedSdk, NODE_ONLY_PATH } from "../support/sdk-package";

let parley: Parley | undefined;
let app: string;

beforeAll(async () => {
  // Each kept as it comes, so that afterAll stops a Parley that started beside a failed install.
  const [started, installed] = await Promise.allSettled([
    startParley({
      embedded: true,
      env: {
        BOOTSTRAP_ACCOUNT: "true",
        SIP_ENABLED: "false",
        LOG_LEVEL: "warn",
        STREAMING_RECORDER_DRIVER: "command",
        STREAMING_RECORDER_COMMAND: "echo ready; exec sleep 60",
      },
    }),
    installedSdk(),
  ]);
  if (started.status === "fulfilled") parley = started.value;
  if (installed.status === "fulfilled") app = installed.value;
  for (const outcome of [started, installed]) if (outcome.status === "rejected") throw outcome.reason;
}, 240_000);

afterAll(async () => {
  await parley?.close();
  if (app) rmSync(app, { recursive: true, force: true });
});

const FAMILIES = [
  "tokens",
  "scheduler",
  "webhooks",
  "events",
  "mapper",
  "streaming",
  "chat",
  "uploads",
  "usage",
  "admin",
  "errors",
];

/** An operator token made on the local socket, as an operator beside the server would. */
async function operatorToken(name: string): Promise<string> {
  const minted = await fetch("http://localhost/api/v1/admin/operator-tokens", {
    unix: join(parley!.dataDir, "parley.sock"),
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ name, scope: "full" }),
  });
  expect(minted.status).toBe(201);
  return ((await minted.json()) as { token: string }).token;
}

/** Runs the driver with `command` in the app folder; resolves with the families it passed. */
async function drive(command: string[], env: Record<string, string>): Promise<string[]> {
  copyFileSync(join(import.meta.dir, "fixtures/drive-sdk.mjs"), join(app, "drive-sdk.mjs"));
  const child = Bun.spawn([...command, "drive-sdk.mjs"], {
    cwd: app,
    env: { HOME: app, PARLEY_URL: parley!.base, PARLEY_API_KEY: await parley!.firstApiKey(), ...env },
    stdout: "pipe",
    stderr: "pipe",
  });
  const killer = setTimeout(() => child.kill("SIGKILL"), 90_000);
  const [stdout, stderr, code] = await Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
    child.exited,
  ]);
  clearTimeout(killer);
  if (code !== 0) console.error(`${stdout}\n${stderr}\n--- Parley said:\n${parley!.tail()}`);
  expect(code).toBe(0);
  return stdout.trim().split("\n");
}

test("the installed package drives every route family on Node without Bun", async () => {
  const passed = await drive(["node"], {
    PATH: NODE_ONLY_PATH,
    PARLEY_OPERATOR_TOKEN: await operatorToken("sdk-node"),
  });
  expect(passed).toEqual(FAMILIES.map((family) => `ok ${family}`));
}, 120_000);

test("the installed package drives every route family on Deno", async () => {
  // Deno from npm (a devDependency), reading the app's package.json and node_modules as installed.
  const deno = resolve(import.meta.dir, "../../node_modules/.bin/deno");
  const passed = await drive([deno, "run", "--allow-all", "--no-prompt"], {
    PATH: NODE_ONLY_PATH,
    DENO_NO_UPDATE_CHECK: "1",
    DENO_DIR: join(app, ".deno"),
    PARLEY_OPERATOR_TOKEN: await operatorToken("sdk-deno"),
  });
  expect(passed).toEqual(FAMILIES.map((family) => `ok ${family}`));
}, 120_000);
