/**
 * The operator's commands on the database directly (`npm run
 * admin`), run as an operator runs it, against the test database.
 */
const entry = new URL("../../src/admin.ts", import.meta.url).pathname;

/** Runs one admin command to its end, with `input` on its stdin: its exit code and what it printed. */
export function adminCliWithInput(input: string | undefined, ...args: string[]) {
  const result = Bun.spawnSync([process.execPath, entry, ...args], {
    env: { ...process.env, LOG_LEVEL: "silent" },
    stdin: input === undefined ? undefined : new TextEncoder().encode(input),
  });
  return { code: result.exitCode, out: result.stdout.toString(), err: result.stderr.toString() };
}

/** Runs one admin command to its end: its exit code and what it printed. */
export const adminCli = (...args: string[]) => adminCliWithInput(undefined, ...args);
