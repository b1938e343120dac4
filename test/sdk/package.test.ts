/**
 * The packed SDK on Node 20 with no Bun on PATH, against Parley started as a process on the
 * embedded database: every route family through the installed package (test/sdk/fixtures/drive-sdk.mjs).
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { copyFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { type Parley, startParley } from "../support/parley";
import { installedSdk, NODE_ONLY_PATH } from "../support/sdk-package";

let parley: Parley | undefined;
let app: string;

beforeAll(async () => {
  [parley, app] = await Promise.all([
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
}, 240_000);

afterAll(async () => {
  await parley?.close();
  if (app) rmSync(app, { recursive: true, force: true });
});

test("the installed package drives every route family on Node without Bun", async () => {
  copyFileSync(join(import.meta.dir, "fixtures/drive-sdk.mjs"), join(app, "drive-sdk.mjs"));
  // The operator token is made on the local socket, as an operator beside the server would.
  const minted = await fetch("http://localhost/api/v1/admin/operator-tokens", {
    unix: join(parley!.dataDir, "parley.sock"),
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ name: "sdk-test", scope: "full" }),
  });
  expect(minted.status).toBe(201);
  const { token } = (await minted.json()) as { token: string };
  const node = Bun.spawn(["node", "drive-sdk.mjs"], {
    cwd: app,
    env: { PATH: NODE_ONLY_PATH, HOME: app, PARLEY_URL: parley!.base, PARLEY_API_KEY: await parley!.firstApiKey(), PARLEY_OPERATOR_TOKEN: token },
    stdout: "pipe",
    stderr: "pipe",
  });
  const killer = setTimeout(() => node.kill("SIGKILL"), 90_000);
  const [stdout, stderr, code] = await Promise.all([new Response(node.stdout).text(), new Response(node.stderr).text(), node.exited]);
  clearTimeout(killer);
  if (code !== 0) console.error(`${stdout}\n${stderr}\n--- Parley said:\n${parley!.tail()}`);
  expect(code).toBe(0);
  expect(stdout.trim().split("\n")).toEqual(["tokens", "scheduler", "webhooks", "events", "mapper", "streaming", "chat", "uploads", "usage", "admin", "errors"].map((family) => `ok ${family}`));
}, 120_000);
