/**
 * A client generator nobody at Parley wrote (@hey-api/openapi-ts, in .ci/contract) makes a
 * TypeScript client from the description a running Parley serves at /swagger/json; the client
 * and .ci/contract/smoke.ts, which drives it unedited, type-check under `strict`; and the smoke
 * run against that Parley issues a token, creates, lists and deletes a reservation, lists a
 * room's chat messages, reads the usage report and creates a webhook endpoint.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { newAccount } from "../helpers";
import { type Parley, startParley } from "../support/parley";

const ROOT = resolve(import.meta.dir, "../..");
const GENERATOR = join(ROOT, ".ci/contract/node_modules/@hey-api/openapi-ts/bin/run.js");
// The repository's compiler (TypeScript 7): the same verdict as the generator's TypeScript 5 in a sixth of the CPU.
const TSC = join(ROOT, "node_modules/.bin/tsc");

const STRICT = {
  compilerOptions: {
    strict: true,
    target: "ES2022",
    module: "ESNext",
    moduleResolution: "bundler",
    lib: ["ES2022", "DOM", "DOM.Iterable"],
    types: [],
    noEmit: true,
  },
  include: ["*.ts", "client/**/*.ts"],
};

/** Runs a command to its end (at most a minute) and gives its exit code and all it printed. */
async function run(command: string[], cwd: string): Promise<{ code: number; output: string }> {
  const child = Bun.spawn(command, { cwd, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  const killer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  const [stdout, stderr, code] = await Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
    child.exited,
  ]);
  clearTimeout(killer);
  return { code, output: `${stdout}${stderr}` };
}

describe("a client @hey-api/openapi-ts generates from the served description", () => {
  let parley: Parley;
  let folder: string;

  beforeAll(async () => {
    folder = mkdtempSync(join(tmpdir(), "parley-generated-client-"));
    parley = await startParley({ embedded: false, env: { SIP_ENABLED: "false", LOG_LEVEL: "warn" } });
  }, 70_000);

  afterAll(async () => {
    await parley?.close();
    if (folder) rmSync(folder, { recursive: true, force: true });
  });

  test("is generated from /swagger/json", async () => {
    const served = await fetch(`${parley.base}/swagger/json`);
    expect(served.status).toBe(200);
    writeFileSync(join(folder, "openapi.json"), await served.text());
    const generated = await run(
      ["node", GENERATOR, "--input", "openapi.json", "--output", "client", "--client", "@hey-api/client-fetch"],
      folder,
    );
    expect(generated.code, generated.output).toBe(0);
    expect(existsSync(join(folder, "client/sdk.gen.ts"))).toBe(true);
  }, 60_000);

  test("type-checks under strict with the smoke program that drives it", async () => {
    const { apiKey } = await newAccount();
    writeFileSync(join(folder, "tsconfig.json"), JSON.stringify(STRICT));
    copyFileSync(join(ROOT, ".ci/contract/smoke.ts"), join(folder, "smoke.ts"));
    writeFileSync(
      join(folder, "target.ts"),
      `export const baseUrl = ${JSON.stringify(parley.base)};\n` +
        `export const apiKey = ${JSON.stringify(apiKey)};\n` +
        // A receiver on loopback that need not exist: creating the endpoint delivers nothing yet.
        `export const webhookUrl = "http://127.0.0.1:9/parley-events";\n`,
    );
    const checked = await run([TSC, "-p", "tsconfig.json"], folder);
    expect(checked.output).toBe("");
    expect(checked.code).toBe(0);
  }, 60_000);

  test("drives a running Parley unedited: token, reservation, chat history, usage report, webhook", async () => {
    const smoke = await run([process.execPath, "smoke.ts"], folder);
    expect(smoke.code, `${smoke.output}\n--- Parley said:\n${parley.tail()}`).toBe(0);
    const seen = JSON.parse(smoke.output.trim().split("\n").at(-1)!);
    expect(seen).toEqual({
      token: 3,
      reservation: expect.any(Number),
      listed: 1,
      messages: 0,
      rooms: 0,
      webhook: "http://127.0.0.1:9/parley-events",
    });
  }, 60_000);
});
