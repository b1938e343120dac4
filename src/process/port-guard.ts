/**
 * Every port a Parley listens on is checked before it opens anything, so a clash (a second
 * Parley on the defaults, or another program) is refused with one message naming each port
 * and the setting that moves it, and leaves nothing behind. A listener that still fails to
 * bind later (a race, an address gone meanwhile) gives the same message (`cannotListen`).
 *
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
import type { Config } from "../core/config";

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

/** Who holds a TCP port, as far as this user can see. */
function heldBy(port: number): string {
  const pids = holders(listeningInodes(port));
  return pids.length > 0
    ? `held by ${[...new Set(pids.map(describeHolder))].join(" and ")}`
    : `held by a process this user cannot see (\`ss -ltnp 'sport = :${port}'\` as root names it)`;
}

/** A socket a Parley listens on, and the setting that moves it. */
interface Listener {
  setting: string;
  what: string;
  protocol: "tcp" | "udp";
  host: string;
  port: number;
  /** Why it is not listened on at all (0, or a role turned off). */
  off?: string;
}

/** Every listener of a Parley with these settings, the ones turned off included. */
function listenersOf(config: Config): Listener[] {
  const sip = config.sip;
  const sipOff = sip.enabled ? undefined : "off (SIP_ENABLED=false)";
  const listeners: Listener[] = [
    { setting: "PORT", what: "HTTP: API, console, /swagger", protocol: "tcp", ...config.http },
    { setting: "SIP_UDP_PORT", what: "SIP over UDP", protocol: "udp", host: sip.bindAddress, port: sip.udpPort },
    { setting: "SIP_TCP_PORT", what: "SIP over TCP", protocol: "tcp", host: sip.bindAddress, port: sip.tcpPort },
    { setting: "SIP_TLS_PORT", what: "SIP over TLS", protocol: "tcp", host: sip.bindAddress, port: sip.tls.port },
    { setting: "METRICS_PORT", what: "Prometheus metrics", protocol: "tcp", ...config.metrics },
  ];
  return listeners.map((listener) => ({
    ...listener,
    off: listener.setting.startsWith("SIP_") && sipOff ? sipOff : listener.port === 0 ? "off (0)" : undefined,
  }));
}

const ANY_ADDRESS = new Set(["", "0.0.0.0", "::"]);

/** Whether two listeners would take the same socket: one protocol and port, on one address or on every one. */
const sharePort = (a: Listener, b: Listener) =>
  a.protocol === b.protocol &&
  a.port === b.port &&
  (a.host === b.host || ANY_ADDRESS.has(a.host) || ANY_ADDRESS.has(b.host));

/** Why the listener cannot bind now (its error code, and who holds a TCP port), or undefined. */
async function bindProblem(listener: Listener): Promise<string | undefined> {
  if (listener.protocol === "tcp") {
    try {
      if (await portIsFree(listener.host, listener.port)) return undefined;
      return `in use, ${heldBy(listener.port)}`;
    } catch (error) {
      return (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    }
  }
  try {
    (await Bun.udpSocket({ hostname: listener.host, port: listener.port })).close();
    return undefined;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return code === "EADDRINUSE" ? "in use" : (code ?? (error as Error).message);
  }
}

const EXPLAINED: Record<string, string> = {
  EADDRNOTAVAIL: "EADDRNOTAVAIL: not an address of this machine",
  EACCES: "EACCES: a port below 1024 needs privileges",
};

/** The table of every listener, with the problems found, and how to move them. */
function refusal(config: Config, headline: string, problems: Map<string, string>): string {
  const rows = listenersOf(config).map((listener) => {
    const where = listener.off ?? `${listener.host}:${listener.port}/${listener.protocol}`;
    const problem = problems.get(listener.setting);
    const state = problem === undefined ? "" : `  <- ${EXPLAINED[problem] ?? problem}`;
    return `  ${`${listener.setting}=${listener.port}`.padEnd(20)} ${listener.what.padEnd(30)} ${where}${state}`;
  });
  return [
    `parley: ${headline}`,
    "A Parley listens on each of these; set the marked ones to free ports (0 turns SIP transports and metrics off):",
    ...rows,
    "A second Parley on this machine needs its own of each, and its own DATA_DIR on the embedded database, e.g.",
    "  PORT=3001 SIP_UDP_PORT=5070 SIP_TCP_PORT=5070 METRICS_PORT=9465 DATA_DIR=./data-2 npm start",
  ].join("\n");
}

/**
 * Why a Parley with these settings cannot listen, naming every port and its setting, or
 * undefined when each listener can bind. Binds each once and lets go: nothing is opened.
 */
export async function listenersRefusal(config: Config): Promise<string | undefined> {
  const problems = new Map<string, string>();
  const listening: Listener[] = [];
  for (const listener of listenersOf(config)) {
    if (listener.off) continue;
    // Two of its own on one port: each binds alone, and the second would fail only once the first serves.
    const before = listening.find((other) => sharePort(other, listener));
    listening.push(listener);
    const problem = before ? `${before.setting} listens there too` : await bindProblem(listener);
    if (problem) problems.set(listener.setting, problem);
  }
  if (problems.size === 0) return undefined;
  const [setting, problem] = [...problems][0]!;
  const { host, port, protocol } = listenersOf(config).find((listener) => listener.setting === setting)!;
  const headline =
    setting === "PORT" && problem.startsWith("in use")
      ? `port ${port} is already in use, ${problem.slice("in use, ".length)}. ` +
        "Stop that process, or start this Parley with another PORT."
      : `cannot listen on ${host}:${port}/${protocol} (${setting}): ${EXPLAINED[problem] ?? problem}.`;
  return refusal(config, headline, problems);
}

/** Whether an error is a listener's failure to bind (in use, not an address here, not allowed). */
export function isBindFailure(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  return code === "EADDRINUSE" || code === "EADDRNOTAVAIL" || code === "EACCES";
}

/** The refusal for a listener that failed to bind after the check (`isBindFailure`). */
export function cannotListen(config: Config, error: unknown): string {
  return refusal(config, `a listener could not bind: ${(error as Error).message}.`, new Map());
}
