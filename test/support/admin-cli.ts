/**
 * The `parley` command line in direct mode (`npm run parley`, `npm run admin`: no Parley
 * running, so it works on the database itself), run as an operator runs it, against the test
 * database. Its data folder is this test process's own: the socket it serves for its command
 * is then never one another test process's command would find and send to.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const entry = new URL("../../src/parley.ts", import.meta.url).pathname;
const dataDir = mkdtempSync(join(tmpdir(), "parley-cli-"));
process.on("exit", () => rmSync(dataDir, { recursive: true, force: true }));

/** Runs one command to its end, with `input` on its stdin: its exit code and what it printed. */
export function adminCliWithInput(input: string | undefined, ...args: string[]) {
  const result = Bun.spawnSync([process.execPath, entry, ...args], {
    env: { ...process.env, DATA_DIR: dataDir, PARLEY_URL: "", LOG_LEVEL: "silent" },
    stdin: input === undefined ? undefined : new TextEncoder().encode(input),
  });
  return { code: result.exitCode, out: result.stdout.toString(), err: result.stderr.toString() };
}

/** Runs one command to its end: its exit code and what it printed. */
export const adminCli = (...args: string[]) => adminCliWithInput(undefined, ...args);
