/**
 * Fan-out benchmark: one sender, 1,000 subscribed sockets. Parley's socket (the `phoenix`
 * client, Redis broker as in production) beside a Socket.IO server doing the same
 * broadcast (the `socket.io-client` client), in the same process and the same run.
 *
 *   TEST_DATABASE_URL=postgres://... bun test/bench/fanout.bench.ts [sockets] [messages]
 *
 * Prints deliveries per second and latency percentiles for: Parley `rtc:` (relay only),
 * Parley `chat:` (stored in PostgreSQL, then broadcast) and Socket.IO, and the ratios.
 * Clients and servers share this process, so the figures are for comparison, not capacity.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";

const SOCKETS = Number(process.argv[2] ?? 1000);
const MESSAGES = Number(process.argv[3] ?? 100);
/** The paced phase: one message every PACE_MS, well under capacity, so latency is not queueing. */
const PACED_MESSAGES = 30;
const PACE_MS = 100;
const DEADLINE_MS = 120_000;

const databaseUrl = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL;
if (!databaseUrl) {
  console.error("set TEST_DATABASE_URL (a database the benchmark may write to)");
  process.exit(2);
}
process.env.DATABASE_URL = databaseUrl;
process.env.REDIS_PREFIX = `parley-bench-${process.pid}`;
process.env.LOG_LEVEL = "silent";
process.env.BOOTSTRAP_ACCOUNT = "false";

const { migrate } = await import("../../src/db/migrate");
const { createApp } = await import("../../src/app");
const { createAccount } = await import("../../src/modules/accounts/service");
const { issueToken, verifyAccessToken } = await import("../../src/modules/token/service");
const { actorFrom, createRoom } = await import("../../src/modules/messaging/service");
const { Socket } = await import("phoenix");
const { Server } = await import("socket.io");
const { io: ioClient } = await import("socket.io-client");

interface Result {
  name: string;
  /** Burst phase: every message sent at once. */
  deliveries: number;
  seconds: number;
  burstLatencies: number[];
  /** Paced phase. */
  pacedLatencies: number[];
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

async function until(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + DEADLINE_MS;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(10);
  }
}

/**
 * Burst: MESSAGES stamped messages at once, until every receiver has them all (throughput,
 * and latency under a full queue). Then paced: PACED_MESSAGES one every PACE_MS (latency).
 */
async function measure(name: string, send: (payload: { t: number; seq: number }) => void, received: () => number, latencies: number[]): Promise<Result> {
  const expected = SOCKETS * MESSAGES;
  const startedAt = performance.now();
  for (let seq = 0; seq < MESSAGES; seq++) send({ t: performance.now(), seq });
  await until(() => received() >= expected, `${name}: ${expected} deliveries`);
  const seconds = (performance.now() - startedAt) / 1000;
  const burstLatencies = latencies.splice(0);
  for (let seq = 0; seq < PACED_MESSAGES; seq++) {
    send({ t: performance.now(), seq });
    await Bun.sleep(PACE_MS);
  }
  await until(() => received() >= expected + SOCKETS * PACED_MESSAGES, `${name}: paced deliveries`);
  return { name, deliveries: expected, seconds, burstLatencies, pacedLatencies: latencies };
}

async function benchParley(topicKind: "rtc" | "chat"): Promise<Result> {
  const server = createApp().listen({ hostname: "127.0.0.1", port: 0 });
  const base = `ws://127.0.0.1:${server.server!.port}/api/v1/messaging`;
  const { account } = await createAccount(`bench-${crypto.randomUUID().slice(0, 8)}`, "EdDSA");
  const token = await issueToken(account.id, { user: { id: "sender", name: "Sender" }, scope: "messaging" });
  const receiverToken = await issueToken(account.id, { user: { id: "receiver" }, scope: "messaging" });
  const room = `bench-${topicKind}`;
  await createRoom(actorFrom(await verifyAccessToken(token, "messaging")), { channelId: room });
  const topic = `${topicKind}:${room}`;
  const event = topicKind === "rtc" ? "tick" : "new_message";

  let count = 0;
  const latencies: number[] = [];
  const sockets: InstanceType<typeof Socket>[] = [];
  const joinOne = (socketToken: string) =>
    new Promise<InstanceType<typeof Socket>["channel"] extends (...args: never[]) => infer C ? C : never>((resolve, reject) => {
      const socket = new Socket(base, { params: { token: socketToken }, reconnectAfterMs: () => 3_600_000, timeout: 60_000 });
      socket.connect();
      sockets.push(socket);
      const channel = socket.channel(topic);
      channel
        .join()
        .receive("ok", () => resolve(channel))
        .receive("error", (error: unknown) => reject(new Error(JSON.stringify(error))))
        .receive("timeout", () => reject(new Error("join timed out")));
    });

  for (let i = 0; i < SOCKETS; i += 100) {
    const batch = await Promise.all(Array.from({ length: Math.min(100, SOCKETS - i) }, () => joinOne(receiverToken)));
    for (const channel of batch) {
      channel.on(event, (payload: { t?: number; content?: string }) => {
        const sentAt = topicKind === "rtc" ? payload.t : Number(payload.content?.split(" ")[0]);
        if (sentAt === undefined || Number.isNaN(sentAt)) return;
        latencies.push(performance.now() - sentAt);
        count++;
      });
    }
  }
  const sender = await joinOne(token);
  await Bun.sleep(1_000); // let the join-time presence traffic settle
  const result = await measure(
    `Parley ${topicKind}:`,
    (payload) => {
      if (topicKind === "rtc") sender.push(event, payload, 60_000);
      else sender.push(event, { content: `${payload.t} #${payload.seq}` }, 60_000);
    },
    () => count,
    latencies,
  );
  for (const socket of sockets) socket.disconnect();
  await server.stop(true);
  return result;
}

async function benchSocketIo(): Promise<Result> {
  const http = createServer();
  const io = new Server(http, { transports: ["websocket"] });
  io.on("connection", (socket) => {
    socket.join("room");
    // The same relay as Parley's rtc topic: everyone in the room but the sender.
    socket.on("tick", (payload) => socket.to("room").emit("tick", payload));
  });
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
  let count = 0;
  const latencies: number[] = [];
  const clients: ReturnType<typeof ioClient>[] = [];
  const connectOne = () =>
    new Promise<ReturnType<typeof ioClient>>((resolve, reject) => {
      const client = ioClient(url, { transports: ["websocket"], reconnection: false, timeout: 60_000 });
      clients.push(client);
      client.on("connect", () => resolve(client));
      client.on("connect_error", reject);
    });
  for (let i = 0; i < SOCKETS; i += 100) {
    const batch = await Promise.all(Array.from({ length: Math.min(100, SOCKETS - i) }, connectOne));
    for (const client of batch) {
      client.on("tick", (payload: { t: number }) => {
        latencies.push(performance.now() - payload.t);
        count++;
      });
    }
  }
  const sender = await connectOne();
  await Bun.sleep(1_000);
  const result = await measure("Socket.IO", (payload) => sender.emit("tick", payload), () => count, latencies);
  for (const client of clients) client.disconnect();
  io.close();
  return result;
}

await migrate();
console.log(`fan-out: 1 sender, ${SOCKETS} receiving sockets, ${MESSAGES} messages (${SOCKETS * MESSAGES} deliveries per run)\n`);
const results = [await benchParley("rtc"), await benchParley("chat"), await benchSocketIo()];
const row = (cells: string[]) => console.log(cells.map((cell, i) => (i === 0 ? cell.padEnd(14) : cell.padStart(14))).join(""));
row(["", "deliveries/s", "burst p99 ms", "paced p50 ms", "paced p99 ms"]);
const figures = new Map<string, { rate: number; p99: number }>();
for (const result of results) {
  const burst = [...result.burstLatencies].sort((a, b) => a - b);
  const paced = [...result.pacedLatencies].sort((a, b) => a - b);
  const rate = result.deliveries / result.seconds;
  figures.set(result.name, { rate, p99: percentile(paced, 99) });
  row([result.name, Math.round(rate).toLocaleString("en"), percentile(burst, 99).toFixed(1), percentile(paced, 50).toFixed(1), percentile(paced, 99).toFixed(1)]);
}
const reference = figures.get("Socket.IO")!;
console.log(`\n(paced: one message every ${PACE_MS} ms; ratios below: Parley ÷ Socket.IO)`);
for (const name of ["Parley rtc:", "Parley chat:"]) {
  const parley = figures.get(name)!;
  console.log(`${name.padEnd(13)} throughput ${(parley.rate / reference.rate).toFixed(2)}×; paced p99 latency ${(parley.p99 / reference.p99).toFixed(2)}×`);
}
const { closeBroker } = await import("../../src/realtime/broker");
const { closeRedis } = await import("../../src/queue/connection");
const { database } = await import("../../src/db/client");
await closeBroker();
await closeRedis();
await database.close();
process.exit(0);
