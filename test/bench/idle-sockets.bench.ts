/**
 * Idle sockets on one server process: how long it takes to accept `sockets` WebSockets that
 * each join one topic, and the server's resident memory per socket once they have (its RSS
 * then, less its RSS before, over the sockets; at once, and settled SETTLE_MS later, once the
 * garbage of the joins is collected and given back), for the bare Bun server of the fan-out
 * benchmark (test/bench/fanout/bare-server.ts) and for Parley (one API process, the local
 * broker, `rtc:` joined with `{presence: false}`). The sockets then send nothing: Parley's
 * idle timeout is raised for the run.
 *
 *   TEST_DATABASE_URL=postgres://... bun test/bench/idle-sockets.bench.ts [sockets=100000]
 *
 * A process may hold as many sockets as it may open files (`ulimit -n`), and one client address
 * reaches one server address and port from about 28,000 ports (ip_local_port_range): the
 * clients are spread over processes of at most PER_PROCESS sockets, each connecting to its own
 * loopback address 127.0.0.<2+i> (the server listens on all of them). BENCH_TARGETS
 * (bare,parley) picks what runs. Where the hard limit on open files may not be raised,
 * test/bench/idle-sockets/guest.sh runs this in a virtual machine of its own.
 */
import type { Subprocess } from "bun";
import { readFileSync } from "node:fs";
import { benchDatabase, closeBench, serverListening, startBench } from "../support/bench";
import { freePort } from "../support/ports";

const SOCKETS = Number(process.argv[2] ?? 100_000);
/** Sockets per client process: under its file limit and under one address's ephemeral ports. */
const PER_PROCESS = 15_000;
const TARGETS = (process.env.BENCH_TARGETS ?? "bare,parley").split(",");
const DEADLINE_MS = Math.max(300_000, SOCKETS * 20);
const SETTLE_MS = 10_000;

benchDatabase("TEST_DATABASE_URL (a database the benchmark may write to)");
process.env.BOOTSTRAP_ACCOUNT = "false";
process.env.LIMIT_SOCKETS_PER_TOKEN = process.env.LIMIT_SOCKETS_PER_USER = "1000000";
process.env.LIMIT_SOCKETS_PER_ACCOUNT = process.env.LIMIT_SOCKETS_PER_PROCESS = "1000000";

const { createAccount } = await import("../../src/modules/accounts/service");
const { setLimit } = await import("../../src/modules/limits/service");
const { issueToken } = await import("../../src/modules/token/service");

const here = new URL(".", import.meta.url).pathname;

/** The soft limit on open files of a process (Bun raises its own to the hard limit as it starts). */
function openFilesLimit(pid: number): number {
  const line = readFileSync(`/proc/${pid}/limits`, "utf8")
    .split("\n")
    .find((each) => each.startsWith("Max open files"));
  return Number(line?.split(/\s+/)[3]);
}

const cpuMs = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
};
const rssBytes = (pid: number) =>
  Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]) * 1024;

/** Waits until the process has used under 2% of a core for a second (at most 30 s). */
async function quiet(pid: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (let before = cpuMs(pid); Date.now() < deadline; ) {
    await Bun.sleep(1_000);
    const after = cpuMs(pid);
    if (after - before <= 20) return;
    before = after;
  }
}

interface Target {
  name: string;
  /** The server, listening on every loopback address; resolves once it answers. */
  start(port: number): Promise<Subprocess>;
  /** The socket URL on one address, and the topic and join payload its clients send. */
  url(host: string, port: number): string;
  topic: string;
  join: object;
}

async function run(target: Target) {
  const port = await freePort();
  const server = await target.start(port);
  const clients: Subprocess[] = [];
  try {
    const limit = openFilesLimit(server.pid);
    if (SOCKETS + 100 > limit) {
      throw new Error(
        `${target.name}: the server may open ${limit} files (ulimit -n), fewer than ${SOCKETS} sockets need; ` +
          "raise the hard limit (as root: ulimit -Hn, or LimitNOFILE), run test/bench/idle-sockets/guest.sh " +
          "(a virtual machine that may) or ask for fewer sockets",
      );
    }
    await quiet(server.pid);
    const rssBefore = rssBytes(server.pid);
    const cpuBefore = cpuMs(server.pid);
    const started = performance.now();
    const processes = Math.ceil(SOCKETS / PER_PROCESS);
    let ready = 0;
    const allReady = Promise.withResolvers<void>();
    for (let i = 0; i < processes; i++) {
      const sockets = Math.floor(SOCKETS / processes) + (i < SOCKETS % processes ? 1 : 0);
      const url = target.url(`127.0.0.${2 + i}`, port);
      const child = Bun.spawn(
        [
          process.execPath,
          `${here}idle-sockets/clients.ts`,
          url,
          String(sockets),
          target.topic,
          JSON.stringify(target.join),
        ],
        {
          stdout: "inherit",
          stderr: "inherit",
          ipc() {
            if (++ready === processes) allReady.resolve();
          },
        },
      );
      child.exited.then((code) => allReady.reject(new Error(`a client process exited with ${code}`)));
      clients.push(child);
    }
    const timeout = setTimeout(() => allReady.reject(new Error(`${target.name}: timed out`)), DEADLINE_MS);
    await allReady.promise.finally(() => clearTimeout(timeout));
    const acceptSeconds = (performance.now() - started) / 1000;
    const acceptCpuMs = cpuMs(server.pid) - cpuBefore;
    await quiet(server.pid);
    const kibPerSocket = (rssBytes(server.pid) - rssBefore) / SOCKETS / 1024;
    await Bun.sleep(SETTLE_MS);
    return {
      name: target.name,
      acceptSeconds,
      acceptCpuMs,
      kibPerSocket,
      settledKibPerSocket: (rssBytes(server.pid) - rssBefore) / SOCKETS / 1024,
      rssMiB: rssBytes(server.pid) / 2 ** 20,
    };
  } finally {
    for (const child of clients) child.kill();
    server.kill();
    await Promise.all([...clients, server].map((child) => child.exited));
  }
}

const services = await startBench();
const { account } = await createAccount(`bench-${crypto.randomUUID().slice(0, 8)}`, "EdDSA");
await setLimit(account.id, "socket.messages", 1_000_000_000);
const token = await issueToken(account, { user: { id: "idle" }, scope: "messaging" });

const catalogue: Record<string, Target> = {
  bare: {
    name: "bare Bun",
    async start(port) {
      const child = Bun.spawn([process.execPath, `${here}fanout/bare-server.ts`, String(port), "0.0.0.0"], {
        stdout: "ignore",
        stderr: "inherit",
      });
      await serverListening(`http://127.0.0.1:${port}`, child, 20_000);
      return child;
    },
    url: (host, port) => `ws://${host}:${port}/bare`,
    topic: "rtc:idle",
    join: {},
  },
  parley: {
    name: "Parley rtc: local",
    async start(port) {
      const child = Bun.spawn([process.execPath, "src/index.ts", "--role=api"], {
        env: {
          ...process.env,
          PORT: String(port),
          HOST: "0.0.0.0",
          REALTIME_BROKER: "local",
          API_PROCESSES: "1",
          // Idle for the whole run: no heartbeats are sent.
          REALTIME_IDLE_TIMEOUT_SECONDS: "3600",
          // Only the API's listener: the measure is its sockets, and no fixed port can be taken.
          METRICS_PORT: "0",
          SIP_ENABLED: "false",
        },
        stdout: "ignore",
        stderr: "inherit",
      });
      await serverListening(`http://127.0.0.1:${port}/healthz`, child, 20_000);
      return child;
    },
    url: (host, port) => `ws://${host}:${port}/api/v1/messaging/websocket?vsn=2.0.0&token=${token}`,
    topic: "rtc:idle",
    join: { presence: false },
  },
};

console.log(`idle sockets: ${SOCKETS} sockets in ${Math.ceil(SOCKETS / PER_PROCESS)} client processes, one topic\n`);
const row = (cells: string[]) =>
  console.log(cells.map((cell, i) => (i === 0 ? cell.padEnd(20) : cell.padStart(14))).join(""));
row(["", "accept s", "sockets/s", "server CPU ms", "KiB/socket", "settled KiB", "RSS MiB"]);
for (const key of TARGETS) {
  const target = catalogue[key];
  if (!target) throw new Error(`unknown target "${key}"; targets are ${Object.keys(catalogue).join(", ")}`);
  const result = await run(target);
  row([
    result.name,
    result.acceptSeconds.toFixed(1),
    Math.round(SOCKETS / result.acceptSeconds).toLocaleString("en"),
    String(result.acceptCpuMs),
    result.kibPerSocket.toFixed(2),
    result.settledKibPerSocket.toFixed(2),
    result.rssMiB.toFixed(0),
  ]);
}
console.log(
  "\n(accept s: from the first connection to the last join answered; KiB/socket: RSS delta over the sockets; " +
    `settled: ${SETTLE_MS / 1000} s later; server RSS: settled)`,
);

await closeBench(services);
process.exit(0);
