/**
 * A private PostgreSQL primary and a hot standby on free loopback ports, replicating
 * synchronously (synchronous_standby_names '*', synchronous_commit on): a commit is
 * acknowledged only once the standby has flushed it, so whatever the primary acknowledged
 * survives its death on the standby. The test plays the failover manager: it kills the
 * primary and promotes the standby. fsync is off on both (the processes are killed, never the
 * machine, so the page cache keeps what was flushed). Runs as the postgres user, as initdb requires.
 */
import { chownSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./ports";
import { initdbInto } from "./private-postgres";
import { childPids, isAlive, until } from "./wait";

const BIN = "/usr/lib/postgresql/15/bin";

function run(args: string[], timeoutMs = 30_000): string {
  const result = Bun.spawnSync(["runuser", "-u", "postgres", "--", ...args], {
    timeout: timeoutMs,
    stdout: "pipe",
    stderr: "pipe",
  });
  if (result.exitCode !== 0)
    throw new Error(`${args.join(" ")} failed (${result.exitCode}): ${result.stderr.toString()}`);
  return result.stdout.toString();
}

function psql(port: number, dir: string, query: string): string {
  return run(
    [`${BIN}/psql`, "-h", dir, "-p", String(port), "-U", "postgres", "-d", "postgres", "-Atc", query],
    10_000,
  ).trim();
}

export interface PostgresPair {
  /** Both hosts, primary first, as an operator writes DATABASE_URL for a pair. */
  url: string;
  primaryPort: number;
  standbyPort: number;
  /** A URL of one host, for the test's own checks. */
  urlOf(port: number): string;
  /** SIGKILL of the primary's postmaster and every backend: as sudden as a lost machine. */
  killPrimary(): Promise<void>;
  /** pg_ctl promote, waiting until the standby accepts writes. */
  promoteStandby(): void;
  destroy(): void;
}

export async function startPostgresPair(): Promise<PostgresPair> {
  const dir = mkdtempSync(join(tmpdir(), "parley-pgpair-"));
  const uid = Number(Bun.spawnSync(["id", "-u", "postgres"]).stdout.toString().trim());
  const gid = Number(Bun.spawnSync(["id", "-g", "postgres"]).stdout.toString().trim());
  chownSync(dir, uid, gid);
  const primary = join(dir, "primary");
  const standby = join(dir, "standby");
  const primaryPort = await freePort();
  const standbyPort = await freePort();
  const common = `-k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100`;
  await initdbInto(primary);
  run([
    `${BIN}/pg_ctl`,
    "-D",
    primary,
    "-l",
    join(dir, "primary.log"),
    "-w",
    "-t",
    "30",
    "start",
    "-o",
    `-p ${primaryPort} ${common} -c wal_level=replica -c max_wal_senders=4 ` +
      `-c synchronous_commit=on -c "synchronous_standby_names=*"`,
  ]);
  run(
    [
      `${BIN}/pg_basebackup`,
      "-h",
      "127.0.0.1",
      "-p",
      String(primaryPort),
      "-U",
      "postgres",
      "-D",
      standby,
      "-R",
      "-X",
      "stream",
      "--no-sync",
    ],
    60_000,
  );
  // Promoted, the standby has no standby of its own: it must not wait for one before acknowledging.
  run([
    `${BIN}/pg_ctl`,
    "-D",
    standby,
    "-l",
    join(dir, "standby.log"),
    "-w",
    "-t",
    "30",
    "start",
    "-o",
    `-p ${standbyPort} ${common} -c hot_standby=on -c "synchronous_standby_names="`,
  ]);
  const pair: PostgresPair = {
    url: `postgres://postgres@127.0.0.1:${primaryPort},127.0.0.1:${standbyPort}/postgres`,
    primaryPort,
    standbyPort,
    urlOf: (port) => `postgres://postgres@127.0.0.1:${port}/postgres`,
    async killPrimary() {
      const postmaster = Number(readFileSync(join(primary, "postmaster.pid"), "utf8").split("\n")[0]);
      const backends = childPids(postmaster);
      process.kill(postmaster, "SIGKILL");
      for (const pid of backends) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {}
      }
      await until(
        () => [postmaster, ...backends].some(isAlive),
        (alive) => !alive,
        10_000,
        20,
      );
    },
    promoteStandby() {
      run([`${BIN}/pg_ctl`, "-D", standby, "-w", "-t", "30", "promote"]);
    },
    destroy() {
      for (const data of [primary, standby]) {
        Bun.spawnSync(["runuser", "-u", "postgres", "--", `${BIN}/pg_ctl`, "-D", data, "-m", "immediate", "stop"], {
          timeout: 30_000,
        });
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
  // Ready once the standby streams from the primary as its synchronous standby.
  const syncState = () => {
    try {
      return psql(primaryPort, dir, "select sync_state from pg_stat_replication");
    } catch {
      return "";
    }
  };
  const synced = await until(syncState, (state) => state === "sync", 30_000, 200);
  if (synced !== "sync") {
    pair.destroy();
    throw new Error(`the standby did not become synchronous within 30 s (sync_state "${synced}")`);
  }
  return pair;
}
