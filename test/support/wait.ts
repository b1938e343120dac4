/** Polling for tests that watch real processes and sockets settle. */
import { readdirSync, readFileSync, readlinkSync } from "node:fs";

/**
 * Probes until `accept` holds or the time is up, and returns the last value either way,
 * so the assertion that follows shows what was actually seen.
 */
export async function until<T>(
  probe: () => T | Promise<T>,
  accept: (value: T) => boolean,
  timeoutMs = 15_000,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let value = await probe();
  while (!accept(value) && Date.now() < deadline) {
    await Bun.sleep(everyMs);
    value = await probe();
  }
  return value;
}

/**
 * Until a boolean check holds; false when it never did. The default ceiling is generous: it costs
 * nothing when the check holds, and a machine running two suites at once may need it.
 */
export const eventually = (check: () => boolean | Promise<boolean>, timeoutMs = 15_000) =>
  until(check, Boolean, timeoutMs, 20);

/** The state letter of a /proc stat file (R, S, Z, X, ...), or undefined once the process or thread is gone. */
function stateIn(statFile: string): string | undefined {
  try {
    return /^\d+ \(.*\) (\S)/.exec(readFileSync(statFile, "utf8"))?.[1];
  } catch {
    return undefined;
  }
}

/** Running, not merely a zombie nobody has reaped yet. */
export function isAlive(pid: number): boolean {
  const state = stateIn(`/proc/${pid}/stat`);
  return state !== undefined && state !== "Z";
}

/**
 * How many of a process's threads have not exited yet: 0 once it is gone or only its zombie
 * main thread is left, which is when its files (its sockets) are closed.
 */
export function threadsLeft(pid: number): number {
  try {
    return readdirSync(`/proc/${pid}/task`).filter((task) => {
      const state = stateIn(`/proc/${pid}/task/${task}/stat`);
      return state !== undefined && state !== "Z" && state !== "X";
    }).length;
  } catch {
    return 0;
  }
}

/** A process's command line, its arguments joined by spaces as pgrep -f sees it; "" once it is gone or a zombie. */
export function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replace(/\0$/, "").replaceAll("\0", " ");
  } catch {
    return "";
  }
}

/**
 * The pids of a process's children (those whose command line ends in `--role=` naming `role`, alone
 * or among the worker roles run together, when given), ascending. Read from each of its threads'
 * children in /proc rather than by pgrep: tests poll this every few tens of milliseconds, and each
 * pgrep was a process reading all of /proc.
 */
export function childPids(pid: number, role?: string): number[] {
  let tasks: string[];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return [];
  }
  const children = new Set<number>();
  for (const task of tasks) {
    try {
      for (const child of readFileSync(`/proc/${pid}/task/${task}/children`, "utf8").split(" ")) {
        if (child.trim() !== "") children.add(Number(child));
      }
    } catch {}
  }
  return [...children].filter((child) => role === undefined || rolesOf(child).includes(role)).sort((a, b) => a - b);
}

/** The roles a Parley child process runs, from its command line's last argument (`--role=recorder,sip,cdr`). */
export function rolesOf(pid: number): string[] {
  return (
    commandLine(pid)
      .match(/\s--role=(\S+)$/)?.[1]
      ?.split(",") ?? []
  );
}

/** Whether the process holds a listening TCP socket on `port`: /proc/net/tcp's listeners, by inode, among its files. */
export function listensOn(pid: number, port: number): boolean {
  const inodes = new Set<string>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text = "";
    try {
      text = readFileSync(table, "utf8");
    } catch {}
    for (const line of text.split("\n").slice(1)) {
      const fields = line.trim().split(/\s+/);
      // local_address is HEXADDR:HEXPORT; state 0A is LISTEN; the inode is the tenth field.
      if (fields[3] === "0A" && Number.parseInt(fields[1]?.split(":")[1] ?? "", 16) === port) inodes.add(fields[9]!);
    }
  }
  try {
    return readdirSync(`/proc/${pid}/fd`).some((fd) => {
      try {
        return inodes.has(/^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`))?.[1] ?? "");
      } catch {
        return false;
      }
    });
  } catch {
    return false;
  }
}
