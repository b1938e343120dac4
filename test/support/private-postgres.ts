/**
 * A PostgreSQL server of a test's own, in a temp dir on a free port, that the test may kill
 * and start again (never the shared one). Runs as the postgres user, as initdb requires.
 */
import { chownSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { madeOnce } from "./made-once";
import { freePort } from "./ports";

const BIN = "/usr/lib/postgresql/15/bin";
const INITDB_OPTIONS = ["-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"];

function postgresUser(): { uid: number; gid: number } {
  const out = Bun.spawnSync(["id", "-u", "postgres"]).stdout.toString().trim();
  const gid = Bun.spawnSync(["id", "-g", "postgres"]).stdout.toString().trim();
  return { uid: Number(out), gid: Number(gid) };
}

function run(args: string[], timeoutMs = 30_000): void {
  const result = Bun.spawnSync(["runuser", "-u", "postgres", "--", ...args], {
    timeout: timeoutMs,
    stdout: "pipe",
    stderr: "pipe",
  });
  if (result.exitCode !== 0)
    throw new Error(`${args.join(" ")} failed (${result.exitCode}): ${result.stderr.toString()}`);
}

/**
 * Makes `data` a new cluster's data folder, as initdb would: a copy of one initdb made once per
 * checkout, since initdb spends seconds of a busy machine on every private server, and a copy
 * is a fraction of that. Each copy is a cluster of its own.
 */
export async function initdbInto(data: string): Promise<void> {
  const name = `parley-postgres-${Bun.hash(`${BIN} ${INITDB_OPTIONS.join(" ")}`).toString(16)}`;
  const template = await madeOnce(name, (building) => {
    mkdirSync(building);
    const { uid, gid } = postgresUser();
    chownSync(building, uid, gid);
    run([`${BIN}/initdb`, "-D", building, ...INITDB_OPTIONS], 60_000);
  });
  // -a keeps the postgres user's ownership and the folder's 0700, which the server requires.
  const copy = Bun.spawnSync(["cp", "-a", template, data], { stderr: "pipe" });
  if (copy.exitCode !== 0) throw new Error(`copying ${template} failed: ${copy.stderr.toString()}`);
}

export interface PrivatePostgres {
  url: string;
  port: number;
  start(): void;
  /** Stops at once, as a crash would: no checkpoint, every connection cut. */
  kill(): void;
  destroy(): void;
}

export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const dir = mkdtempSync(join(tmpdir(), "parley-pg-"));
  const { uid, gid } = postgresUser();
  chownSync(dir, uid, gid);
  const data = join(dir, "data");
  const port = await freePort();
  await initdbInto(data);
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100`;
  const instance: PrivatePostgres = {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    start: () => run([`${BIN}/pg_ctl`, "-D", data, "-l", join(dir, "log"), "-o", options, "-w", "-t", "30", "start"]),
    kill: () => run([`${BIN}/pg_ctl`, "-D", data, "-m", "immediate", "-w", "-t", "30", "stop"]),
    destroy: () => {
      Bun.spawnSync(["runuser", "-u", "postgres", "--", `${BIN}/pg_ctl`, "-D", data, "-m", "immediate", "stop"], {
        timeout: 30_000,
      });
      rmSync(dir, { recursive: true, force: true });
    },
  };
  instance.start();
  return instance;
}
