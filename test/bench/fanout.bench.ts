/**
 * Fan-out benchmark, clients in their own processes (as Socket.IO's and Centrifugo's own
 * benchmarks run them): one sender and `sockets` receiving sockets spread over several
 * client processes, against one server process at a time:
 *
 * - a bare Bun WebSocket server doing nothing but `publish` (the physical limit here; it
 *   speaks just enough Phoenix for the same `phoenix` clients, so only the servers differ),
 * - Socket.IO 4 broadcasting to a room (on Node, its home runtime; `socket.io-client`),
 * - Parley `rtc:` (relay only) with the Redis broker, and with the local one,
 * - Parley `chat:` (each message stored in PostgreSQL, then broadcast), Redis broker,
 * - Parley `rtc:` on two API processes with the Redis broker, the receivers spread over
 *   both and the sender on the first (frames cross Redis to half of the receivers).
 *
 * Parley is one API process (`src/index.ts --role=api`) and its receivers the unchanged
 * `phoenix` client. A burst of `messages` gives deliveries per second (and the server's
 * CPU time for them); then 30 messages, one every 100 ms, give latency. Also printed: how
 * long the receivers took to join, and the server's resident memory per receiving socket
 * (its RSS once they have joined, less its RSS before, over the sockets), at once and once
 * settled: SETTLE_MS later, when the garbage of the joins (the upgrade requests, token
 * checks, queries) has been collected and given back, which Bun does within seconds of idling.
 *
 *   TEST_DATABASE_URL=postgres://... bun test/bench/fanout.bench.ts [sockets=1000] [messages=100]
 *
 * BENCH_CLIENT_PROCESSES (4) sets the receiving processes; BENCH_TARGETS (comma-separated names: bare, socketio,
 * rtc-redis, rtc-local, chat, rtc-redis-2, bare-sized: the bare server with frames as large as chat's, bare-stored:
 * that server storing each message first, both listed after chat) picks what runs; BENCH_CPU_PROFILE=<dir>
 * writes CPU profiles of the Parley server there. BENCH_PRESENCE=off has Parley's receivers
 * join with `{presence: false}` (every listed socket costs each later join its whole list).
 */
import type { Subprocess } from "bun";
import { readFileSync } from "node:fs";
import { benchDatabase, serverListening } from "../support/bench";
import { freePort } from "../support/ports";

const SOCKETS = Number(process.argv[2] ?? 1000);
const MESSAGES = Number(process.argv[3] ?? 100);
const CLIENT_PROCESSES = Number(process.env.BENCH_CLIENT_PROCESSES ?? 4);
/**
 * The paced phase: one message every PACE_MS, well under capacity, so latency is not queueing.
 * BENCH_PACE_MS (100) slows it for many receivers: at 10,000, one message every 100 ms is
 * 100,000 deliveries a second, more than the client processes here read. BENCH_PACED sets how many (30, and 60
 * from 10,000 receivers, where a p99 of 30 messages is the tail of the slowest one or two).
 */
const PACED_MESSAGES = Number(process.env.BENCH_PACED ?? (SOCKETS >= 10_000 ? 60 : 30));
const PACE_MS = Number(process.env.BENCH_PACE_MS ?? 100);
/** A minute per thousand receivers, at least two: 10,000 joins, or 1,000 with presence, take minutes when busy. */
const PHASE_DEADLINE_MS = Math.max(120_000, SOCKETS * 60);
const TARGETS = (process.env.BENCH_TARGETS ?? "bare,socketio,rtc-redis,rtc-local,chat,rtc-redis-2").split(",");
/** How long the servers idle before the settled memory is read. */
const SETTLE_MS = 10_000;
const RECEIVER_JOIN = JSON.stringify(process.env.BENCH_PRESENCE === "off" ? { presence: false } : {});

benchDatabase("TEST_DATABASE_URL (a database the benchmark may write to)");
process.env.BOOTSTRAP_ACCOUNT = "false";
// Every receiving socket uses one token, and 10,000 of them with the sender pass the default per process.
process.env.LIMIT_SOCKETS_PER_TOKEN = process.env.LIMIT_SOCKETS_PER_USER = "1000000";
process.env.LIMIT_SOCKETS_PER_ACCOUNT = "1000000";
process.env.LIMIT_SOCKETS_PER_PROCESS = "1000000";

// Built as an API process is (src/process/root.ts): the database, Redis and the rest put in place.
const services = await (await import("../../src/process/root")).buildProcess("api");
const { migrate } = await import("../../src/db/migrate");
const { createAccount } = await import("../../src/modules/accounts/service");
const { setLimit } = await import("../../src/modules/limits/service");
const { issueToken } = await import("../../src/modules/token/service");
const { verifyAccessToken } = await import("../../src/modules/auth/access-token");
const { createRoom } = await import("../../src/modules/chat/rooms");
const { actorFrom } = await import("../../src/modules/auth/actor");
const { Socket } = await import("phoenix");
const { io: ioClient } = await import("socket.io-client");

const here = new URL(".", import.meta.url).pathname;
/**
 * Each target's figures as it ends, by its key in the catalogue: a target listed twice in BENCH_TARGETS (the bare
 * server first and last, say) runs twice, and the ratios take the mean of its runs, so a drift of the machine's
 * speed over the run does not land on one side only.
 */
const results = new Map<string, Result[]>();
const now = () => performance.timeOrigin + performance.now();
type Stamp = { t: number; seq: number };

interface Server {
  /** One, or several API processes sharing the Redis broker. */
  processes: Subprocess[];
  /** What the receivers connect to, the client processes taking them in turn; the sender takes the first. */
  urls: string[];
}

interface Target {
  name: string;
  start(port: number): Promise<Server>;
  /** Arguments of clients.ts: kind, url, phases, then token, topic, event (the socket count goes after the url). */
  clients(url: string, phases: string): string[];
  /** Connects the sender; resolves to its send function and its disconnect. */
  sender(server: Server): Promise<{ send(stamp: Stamp): void; close(): void }>;
}

interface Result {
  name: string;
  deliveriesPerSecond: number;
  serverCpuMs: number;
  joinSeconds: number;
  /** Resident memory the receivers' sockets added to the server processes, per socket: at once, and settled. */
  bytesPerSocket: number;
  settledBytesPerSocket: number;
  burst: number[];
  paced: number[];
  /** Each paced message's earliest delivery to any receiver: the server's time before its fan-out begins. */
  pacedFirsts: number[];
  /** The JSON length of a message's payload as the receivers got it. */
  payloadBytes: number;
}

/** User plus system CPU time of a process so far, in ms (Linux). */
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** Resident memory of a process, in bytes (Linux). */
function rssBytes(pid: number): number {
  const kib = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
  return Number(kib) * 1024;
}

/**
 * Waits until the server has used under 2% of a core for 500 ms (at most 20 s), so the burst starts on an idle server.
 */
async function quiet(pid: number): Promise<void> {
  const deadline = Date.now() + 20_000;
  for (let before = cpuMs(pid); Date.now() < deadline; ) {
    await Bun.sleep(500);
    const after = cpuMs(pid);
    if (after - before <= 10) return;
    before = after;
  }
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

async function within<T>(promise: Promise<T>, what: string, ms = PHASE_DEADLINE_MS): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

async function run(target: Target): Promise<Result> {
  const server = await target.start(await freePort());
  const children: Subprocess[] = [];
  const serverRss = () => server.processes.reduce((sum, child) => sum + rssBytes(child.pid), 0);
  try {
    for (const child of server.processes) await quiet(child.pid);
    const rssBefore = serverRss();
    const joinsStarted = now();
    type Report = { latencies: number[]; firsts: Array<[number, number]>; at: number; payloadBytes: number };
    const reports = new Map<number, Report[]>();
    const waiters: Array<() => void> = [];
    let ready = 0;
    const notify = () => {
      for (const waiter of waiters.splice(0)) waiter();
    };
    const until = (check: () => boolean, what: string) =>
      within(
        new Promise<void>((resolve) => {
          const poll = () => (check() ? resolve() : waiters.push(poll));
          poll();
        }),
        `${target.name}: ${what}`,
      );
    for (let i = 0; i < CLIENT_PROCESSES; i++) {
      const sockets = Math.floor(SOCKETS / CLIENT_PROCESSES) + (i < SOCKETS % CLIENT_PROCESSES ? 1 : 0);
      const [kind, ...rest] = target.clients(server.urls[i % server.urls.length]!, `${MESSAGES},${PACED_MESSAGES}`);
      children.push(
        Bun.spawn([process.execPath, `${here}fanout/clients.ts`, kind!, rest[0]!, String(sockets), ...rest.slice(1)], {
          stdout: "inherit",
          stderr: "inherit",
          ipc(message: { type: string; phase?: number } & Partial<Report>) {
            if (message.type === "ready") ready++;
            else {
              const { latencies, firsts, at, payloadBytes } = message as Report;
              reports.set(message.phase!, [
                ...(reports.get(message.phase!) ?? []),
                { latencies, firsts, at, payloadBytes },
              ]);
            }
            notify();
          },
        }),
      );
    }
    await until(() => ready === CLIENT_PROCESSES, "receivers joined");
    const joinSeconds = (now() - joinsStarted) / 1000;
    const sender = await within(target.sender(server), `${target.name}: sender`);
    for (const child of server.processes) await quiet(child.pid); // the join-time traffic (presence) is over
    const bytesPerSocket = (serverRss() - rssBefore) / SOCKETS;
    await Bun.sleep(SETTLE_MS);
    const settledBytesPerSocket = (serverRss() - rssBefore) / SOCKETS;

    const serverCpu = () => server.processes.reduce((sum, child) => sum + cpuMs(child.pid), 0);
    const cpuBefore = serverCpu();
    const startedAt = now();
    for (let seq = 0; seq < MESSAGES; seq++) sender.send({ t: now(), seq });
    await until(() => reports.get(0)?.length === CLIENT_PROCESSES, "burst deliveries");
    const lastAt = Math.max(...reports.get(0)!.map((report) => report.at));
    const serverCpuMs = serverCpu() - cpuBefore;

    for (let seq = 0; seq < PACED_MESSAGES; seq++) {
      sender.send({ t: now(), seq });
      await Bun.sleep(PACE_MS);
    }
    await until(() => reports.get(1)?.length === CLIENT_PROCESSES, "paced deliveries");
    sender.close();
    const firsts = new Map<number, number>();
    for (const report of reports.get(1)!)
      for (const [sentAt, latency] of report.firsts)
        firsts.set(sentAt, Math.min(latency, firsts.get(sentAt) ?? Number.POSITIVE_INFINITY));
    return {
      name: target.name,
      deliveriesPerSecond: (SOCKETS * MESSAGES) / ((lastAt - startedAt) / 1000),
      serverCpuMs,
      joinSeconds,
      bytesPerSocket,
      settledBytesPerSocket,
      burst: reports.get(0)!.flatMap((report) => report.latencies),
      paced: reports.get(1)!.flatMap((report) => report.latencies),
      pacedFirsts: [...firsts.values()],
      payloadBytes: reports.get(1)![0]!.payloadBytes,
    };
  } finally {
    for (const child of children) child.kill();
    for (const child of server.processes) child.kill();
    await Promise.all([...children, ...server.processes].map((child) => child.exited));
  }
}

// ---- the targets

/** The bare server, storing each push in `database` first when given one (bare-server.ts). */
async function startBare(port: number, database?: string): Promise<Server> {
  const child = Bun.spawn(
    [process.execPath, `${here}fanout/bare-server.ts`, String(port), "127.0.0.1", ...(database ? [database] : [])],
    { stdout: "ignore", stderr: "inherit" },
  );
  await serverListening(`http://127.0.0.1:${port}`, child, 10_000);
  return { processes: [child], urls: [`ws://127.0.0.1:${port}/bare`] };
}

const bare: Target = {
  name: "bare Bun publish",
  start: (port) => startBare(port),
  clients: (url, phases) => ["phoenix", url, phases, "", "rtc:bare", "tick"],
  sender: (server) => phoenixSender(server.urls[0]!, "", "rtc:bare", (stamp) => ["tick", stamp]),
};

/**
 * The bare server relaying frames as large as `chat:`'s (run it after `chat`): its stamp padded to the payload the
 * chat receivers got, a stored message with its ids, author and times. The receivers' share of the two cores grows
 * with the bytes they read, so this is the floor `chat:`'s paced latency is compared with.
 */
const bareSized: Target = {
  ...bare,
  name: "bare, chat's bytes",
  sender(server) {
    const chatBytes = results.get("chat")?.at(-1)?.payloadBytes;
    if (chatBytes === undefined) throw new Error('"bare-sized" pads to the chat payload: list it after "chat"');
    return phoenixSender(server.urls[0]!, "", "rtc:bare", (stamp) => {
      const pad = Math.max(0, chatBytes - JSON.stringify({ ...stamp, pad: "" }).length);
      return ["tick", { ...stamp, pad: "x".repeat(pad) }];
    });
  },
};

/**
 * The bare server with chat's bytes that also stores each message in PostgreSQL, one row committed, before it
 * relays it (run it after `chat`): the floor of a message broadcast only once durable, which `chat:` is.
 */
const bareStored: Target = {
  ...bareSized,
  name: "bare, stored first",
  start: (port) => startBare(port, process.env.DATABASE_URL),
};

/** A `phoenix` client that joins `topic` and pushes one event per stamp. */
async function phoenixSender(url: string, token: string, topic: string, push: (stamp: Stamp) => [string, object]) {
  const socket = new Socket(url, { params: { token }, reconnectAfterMs: () => 3_600_000, timeout: 60_000 });
  socket.connect();
  const channel = socket.channel(topic);
  await new Promise((resolve, reject) => {
    channel.join().receive("ok", resolve).receive("error", reject).receive("timeout", reject);
  });
  return {
    send: (stamp: Stamp) => channel.push(...push(stamp), 60_000),
    close: () => socket.disconnect(),
  };
}

const socketIo: Target = {
  name: "Socket.IO",
  async start(port) {
    const runtime = Bun.which("node") ?? process.execPath;
    const child = Bun.spawn([runtime, `${here}fanout/socketio-server.mjs`, String(port)], {
      stdout: "ignore",
      stderr: "inherit",
    });
    const url = `http://127.0.0.1:${port}`;
    await serverListening(`${url}/socket.io/?EIO=4&transport=polling`, child, 10_000);
    return { processes: [child], urls: [url] };
  },
  clients: (url, phases) => ["socketio", url, phases],
  async sender(server) {
    const client = ioClient(server.urls[0]!, { transports: ["websocket"], reconnection: false });
    await new Promise((resolve, reject) => {
      client.on("connect", () => resolve(undefined));
      client.on("connect_error", reject);
    });
    return { send: (stamp) => client.emit("tick", stamp), close: () => client.disconnect() };
  },
};

await migrate();
const { account } = await createAccount(`bench-${crypto.randomUUID().slice(0, 8)}`, "EdDSA");
// One sender bursts and one receiver user joins a thousand times: lift the per-user frame limit (docs/limits.md).
await setLimit(account.id, "socket.messages", 1_000_000_000);
const senderToken = await issueToken(account, { user: { id: "sender", name: "Sender" }, scope: "messaging" });
const receiverToken = await issueToken(account, { user: { id: "receiver" }, scope: "messaging" });
const senderActor = actorFrom(await verifyAccessToken(senderToken, "messaging"));

/** Parley on `apiProcesses` API processes (each its own port), the receivers spread over them. */
function parley(name: string, kind: "rtc" | "chat", broker: "redis" | "local", apiProcesses = 1): Target {
  const room = `bench-${kind}-${broker}-${apiProcesses}`;
  const topic = `${kind}:${room}`;
  const event = kind === "rtc" ? "tick" : "new_message";
  const profile = process.env.BENCH_CPU_PROFILE
    ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_CPU_PROFILE}`]
    : [];
  return {
    name,
    async start(port) {
      await createRoom(senderActor, { channelId: room });
      const ports = [port, ...(await Promise.all(Array.from({ length: apiProcesses - 1 }, freePort)))];
      const processes = ports.map((each) =>
        Bun.spawn([process.execPath, ...profile, "src/index.ts", "--role=api"], {
          env: {
            ...process.env,
            PORT: String(each),
            HOST: "127.0.0.1",
            REALTIME_BROKER: broker,
            API_PROCESSES: String(apiProcesses),
          },
          stdout: "ignore",
          stderr: "inherit",
        }),
      );
      await Promise.all(
        ports.map((each, i) => serverListening(`http://127.0.0.1:${each}/healthz`, processes[i]!, 10_000)),
      );
      return { processes, urls: ports.map((each) => `ws://127.0.0.1:${each}/api/v1/messaging`) };
    },
    clients: (url, phases) => ["phoenix", url, phases, receiverToken, topic, event, RECEIVER_JOIN],
    sender: (server) =>
      phoenixSender(server.urls[0]!, senderToken, topic, (stamp) =>
        kind === "rtc" ? [event, stamp] : [event, { content: `${stamp.t} #${stamp.seq}` }],
      ),
  };
}

const catalogue: Record<string, Target> = {
  bare,
  "bare-sized": bareSized,
  "bare-stored": bareStored,
  socketio: socketIo,
  "rtc-redis": parley("Parley rtc: redis", "rtc", "redis"),
  "rtc-local": parley("Parley rtc: local", "rtc", "local"),
  chat: parley("Parley chat:", "chat", "redis"),
  "rtc-redis-2": parley("Parley rtc: 2 procs", "rtc", "redis", 2),
};

console.log(
  `fan-out: 1 sender, ${SOCKETS} receiving sockets in ${CLIENT_PROCESSES} client ` +
    `processes, ${MESSAGES} messages (${SOCKETS * MESSAGES} deliveries per burst)\n`,
);
const row = (cells: string[]) =>
  console.log(cells.map((cell, i) => (i === 0 ? cell.padEnd(20) : cell.padStart(14))).join(""));
row([
  "",
  "deliveries/s",
  "server CPU ms",
  "burst p99 ms",
  "paced p50 ms",
  "paced p99 ms",
  "first p50 ms",
  "first max ms",
  "joins s",
  "KiB/socket",
  "settled KiB",
]);
// Each row as soon as its run ends: a later target that fails leaves the earlier figures printed.
for (const key of TARGETS) {
  const target = catalogue[key];
  if (!target) throw new Error(`unknown target "${key}"; targets are ${Object.keys(catalogue).join(", ")}`);
  const result = await run(target);
  results.set(key, [...(results.get(key) ?? []), result]);
  const burst = [...result.burst].sort((a, b) => a - b);
  const paced = [...result.paced].sort((a, b) => a - b);
  const firsts = [...result.pacedFirsts].sort((a, b) => a - b);
  row([
    result.name,
    Math.round(result.deliveriesPerSecond).toLocaleString("en"),
    String(result.serverCpuMs),
    percentile(burst, 99).toFixed(1),
    percentile(paced, 50).toFixed(1),
    percentile(paced, 99).toFixed(1),
    percentile(firsts, 50).toFixed(1),
    (firsts.at(-1) ?? Number.NaN).toFixed(1),
    result.joinSeconds.toFixed(1),
    (result.bytesPerSocket / 1024).toFixed(1),
    (result.settledBytesPerSocket / 1024).toFixed(1),
  ]);
}
console.log(
  `\n(server CPU: the server processes' CPU time during the burst; paced: one message every ${PACE_MS} ms; ` +
    "first: a paced message's earliest delivery, the time before its fan-out began; " +
    `KiB/socket: RSS delta once joined; settled: ${SETTLE_MS / 1000} s later)`,
);
const ratio = (key: string, reference: string) => {
  const a = results.get(key);
  const b = results.get(reference);
  if (!a || !b) return;
  const mean = (runs: Result[], figure: (r: Result) => number) =>
    runs.reduce((sum, run) => sum + figure(run), 0) / runs.length;
  const p99 = (r: Result) =>
    percentile(
      [...r.paced].sort((x, y) => x - y),
      99,
    );
  const name = (runs: Result[]) => `${runs[0]!.name}${runs.length > 1 ? ` (${runs.length} runs)` : ""}`;
  const rate = (r: Result) => r.deliveriesPerSecond;
  console.log(
    `${name(a).padEnd(20)} ÷ ${name(b).padEnd(17)} throughput ${(mean(a, rate) / mean(b, rate)).toFixed(2)}×; ` +
      `paced p99 ${(mean(a, p99) / mean(b, p99)).toFixed(2)}×`,
  );
};
ratio("rtc-redis", "bare");
ratio("rtc-local", "bare");
ratio("chat", "socketio");
ratio("chat", "bare");
ratio("chat", "bare-sized");
ratio("chat", "bare-stored");
ratio("bare-stored", "bare");
const payloads = [...results.values()].map(([result]) => `${result!.name} ${result!.payloadBytes}`);
console.log(`payload bytes a message: ${payloads.join(", ")}`);
ratio("rtc-redis", "socketio");
ratio("rtc-redis-2", "bare");

await services.stop();
process.exit(0);
