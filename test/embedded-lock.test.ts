/**
 * The embedded database's folder lock (DATA_DIR/parley.pid), through the command line in
 * direct mode (no socket answers, so it opens the database itself): a folder held by a live
 * process is refused, naming what to do; a pid file whose pid now belongs to another process (a
 * restart after a crash, where pids are reused, as in containers) is taken over.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { migratedDataDir } from "./support/parley";

const root = join(import.meta.dir, "..");
const dataDir = mkdtempSync(join(tmpdir(), "parley-lock-"));
// Stands in for whatever process holds the pid now.
const other = Bun.spawn(["sleep", "60"], { stdout: "ignore", stderr: "ignore" });

afterAll(() => {
  other.kill("SIGKILL");
  rmSync(dataDir, { recursive: true, force: true });
});

const startTime = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
};

async function admin(...args: string[]) {
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    DATA_DIR: dataDir,
    LOG_LEVEL: "silent",
  };
  delete env.DATABASE_URL;
  const cli = Bun.spawn([process.execPath, join(root, "src/parley.ts"), ...args], {
    cwd: root,
    env,
    stdout: "pipe",
    stderr: "pipe",
  });
  const killer = setTimeout(() => cli.kill("SIGKILL"), 45_000);
  const [stdout, stderr, code] = await Promise.all([
    new Response(cli.stdout).text(),
    new Response(cli.stderr).text(),
    cli.exited,
  ]);
  clearTimeout(killer);
  return { code, stdout, stderr };
}

test("a folder held by a live process is refused; a pid reused by another process is taken over", async () => {
  // A folder a Parley has run on: the lock is the subject here, not PGlite's initdb and migrations.
  await migratedDataDir(dataDir);
  writeFileSync(join(dataDir, "parley.pid"), `${other.pid} ${startTime(other.pid)}`);
  const refused = await admin("list-accounts");
  expect(refused.code).toBe(1);
  expect(refused.stderr).toContain(`is open in process ${other.pid}`);
  expect(refused.stderr).toContain("stop that one first, or let it take the command: `npm run parley -- <command>`");
  expect(refused.stderr).toContain(`If no Parley runs, delete ${join(dataDir, "parley.pid")}`);

  // The same pid, but a process that started at another time: the holder is gone.
  writeFileSync(join(dataDir, "parley.pid"), `${other.pid} 1`);
  const taken = await admin("list-accounts");
  expect(taken.stderr).toBe(
    `parley: no running Parley found: no socket at ${join(dataDir, "parley.sock")}; working on the database directly\n`,
  );
  expect(taken.code).toBe(0);
  expect(taken.stdout).toContain("no accounts");
  // Released on exit.
  expect(await Bun.file(join(dataDir, "parley.pid")).exists()).toBe(false);
}, 60_000);
