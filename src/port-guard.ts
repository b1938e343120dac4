/**
 * One Parley per port. The API processes listen with reusePort so the supervisor's pool
 * shares PORT, which would also let a second Parley join in silently and take part of the
 * requests. So the supervisor first binds PORT once without reusePort: the kernel refuses
 * that while anything listens there (with reusePort or not), and a crashed Parley's socket
 * is gone with its process, so nothing stale can block a restart. When it is refused, the
 * holder is looked up in /proc to name it.
 */
import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import { createServer } from "node:net";
import { resolve } from "node:path";

/** True when nothing listens on host:port, as a bind without reusePort finds. */
function portIsFree(host: string, port: number): Promise<boolean> {
  return new Promise((done, fail) => {
    const probe = createServer();
    probe.once("error", (error: NodeJS.ErrnoException) => (error.code === "EADDRINUSE" ? done(false) : fail(error)));
    probe.listen({ host, port, exclusive: true }, () => probe.close(() => done(true)));
  });
}

/** Socket inodes of the listeners on the port, from the kernel's TCP tables. */
function listeningInodes(port: number): Set<string> {
  const inodes = new Set<string>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = readFileSync(table, "utf8");
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      const fields = line.trim().split(/\s+/);
      // local_address is HEXADDR:HEXPORT; state 0A is LISTEN; the inode is the tenth field.
      if (fields.length > 9 && fields[3] === "0A" && Number.parseInt(fields[1]!.split(":")[1]!, 16) === port)
        inodes.add(fields[9]!);
    }
  }
  return inodes;
}

function read(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

/** Processes holding one of the sockets; those of other users stay unseen. */
function holders(inodes: Set<string>): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${entry}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      let target: string;
      try {
        target = readlinkSync(`/proc/${entry}/fd/${fd}`);
      } catch {
        continue;
      }
      const socket = /^socket:\[(\d+)\]$/.exec(target);
      if (socket && inodes.has(socket[1]!)) {
        found.push(Number(entry));
        break;
      }
    }
  }
  return found;
}

interface ProcessInfo {
  pid: number;
  command: string;
  cwd?: string;
  env: Map<string, string>;
}

function describeProcess(pid: number): ProcessInfo | undefined {
  const cmdline = read(`/proc/${pid}/cmdline`);
  if (cmdline === undefined) return undefined;
  let cwd: string | undefined;
  try {
    cwd = readlinkSync(`/proc/${pid}/cwd`);
  } catch {}
  const env = new Map<string, string>();
  for (const pair of (read(`/proc/${pid}/environ`) ?? "").split("\0")) {
    const at = pair.indexOf("=");
    if (at > 0) env.set(pair.slice(0, at), pair.slice(at + 1));
  }
  return { pid, command: cmdline.split("\0").filter(Boolean).join(" "), cwd, env };
}

function parentOf(pid: number): number | undefined {
  // The command may hold spaces and parentheses; the fields after its closing one are plain.
  const stat = read(`/proc/${pid}/stat`);
  const ppid = stat ? Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]) : Number.NaN;
  return Number.isInteger(ppid) && ppid > 0 ? ppid : undefined;
}

/** Where a Parley keeps its data: its database (without credentials), or its embedded data folder. */
function storeOf(info: ProcessInfo): string | undefined {
  const databaseUrl = info.env.get("DATABASE_URL");
  if (databaseUrl) {
    try {
      const url = new URL(databaseUrl);
      return `database ${url.host}${url.pathname}`;
    } catch {
      return "a PostgreSQL database";
    }
  }
  if (!info.cwd) return undefined;
  return `data folder ${resolve(info.cwd, info.env.get("DATA_DIR") ?? "./data")}`;
}

function describeHolder(pid: number): string {
  let info = describeProcess(pid);
  if (!info) return `pid ${pid}`;
  // An API process of another Parley's pool: its supervisor is the one to name.
  if (/\s--role=api\b/.test(info.command)) {
    const parent = parentOf(pid);
    const supervisor = parent === undefined ? undefined : describeProcess(parent);
    if (supervisor) info = supervisor;
  }
  const where = [info.cwd && `in ${info.cwd}`, storeOf(info)].filter(Boolean).join(", ");
  return `pid ${info.pid} (${info.command}${where ? `; ${where}` : ""})`;
}

/** Why PORT cannot be served, naming what holds it, or undefined when it is free. */
export async function portHeldBy(host: string, port: number): Promise<string | undefined> {
  if (port === 0 || (await portIsFree(host, port))) return undefined;
  const pids = holders(listeningInodes(port));
  const held =
    pids.length > 0
      ? `held by ${[...new Set(pids.map(describeHolder))].join(" and ")}`
      : `held by a process this user cannot see (\`ss -ltnp 'sport = :${port}'\` as root names it)`;
  return `port ${port} is already in use, ${held}. Stop that process, or start this Parley with another PORT.`;
}
