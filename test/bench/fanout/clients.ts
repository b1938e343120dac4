/**
 * One receiving process of the fan-out benchmark: opens `sockets` sockets of one kind,
 * counts the stamped messages they receive and reports to the coordinator over IPC when
 * a phase is complete (its latencies: receive time minus the stamp, both epoch ms).
 *
 *   bun clients.ts <kind: phoenix|socketio|bare> <url> <sockets> <per-phase counts, comma-separated>
 *     [token] [topic] [event] [join params, JSON]
 */
import { Socket } from "phoenix";
import { io } from "socket.io-client";

const [kind, url, socketsArg, phasesArg, token = "", topic = "", event = "tick", joinParams = "{}"] =
  process.argv.slice(2);
const SOCKETS = Number(socketsArg);
/** Messages the sender sends in each phase; every socket receives each one. */
const phases = phasesArg!.split(",").map(Number);
const JOIN_BATCH = 50;

const now = () => performance.timeOrigin + performance.now();
let phase = 0;
let count = 0;
let latencies: number[] = [];
/** Each message's earliest delivery in this process, by its stamp: how long the server took before fanning it out. */
let firsts = new Map<number, number>();
/** The JSON length of the phase's first payload: what a frame carries beyond the protocol's envelope. */
let payloadBytes = 0;

/** Chat messages carry the stamp as their content's first word, relays as `t`. */
function received(payload: { t?: number; content?: string }): void {
  const sentAt = payload.t ?? Number(payload.content?.split(" ")[0]);
  if (!Number.isFinite(sentAt)) return;
  const latency = now() - sentAt;
  latencies.push(latency);
  if (latency < (firsts.get(sentAt) ?? Number.POSITIVE_INFINITY)) firsts.set(sentAt, latency);
  if (count === 0) payloadBytes = JSON.stringify(payload).length;
  if (++count < SOCKETS * phases[phase]!) return;
  process.send!({ type: "phase", phase, latencies, firsts: [...firsts], at: now(), payloadBytes });
  phase++;
  count = 0;
  latencies = [];
  firsts = new Map();
}

function openPhoenix(): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = new Socket(url!, { params: { token }, reconnectAfterMs: () => 3_600_000, timeout: 60_000 });
    socket.connect();
    const channel = socket.channel(topic, JSON.parse(joinParams));
    channel.on(event, received);
    channel
      .join()
      .receive("ok", () => resolve())
      .receive("error", (error: unknown) => reject(new Error(JSON.stringify(error))))
      .receive("timeout", () => reject(new Error("join timed out")));
  });
}

function openSocketIo(): Promise<void> {
  return new Promise((resolve, reject) => {
    const client = io(url!, { transports: ["websocket"], reconnection: false, timeout: 60_000 });
    client.on("tick", received);
    client.on("connect", () => resolve());
    client.on("connect_error", reject);
  });
}

function openBare(): Promise<void> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url!);
    ws.onmessage = (message) => received(JSON.parse(String(message.data)));
    ws.onopen = () => resolve();
    ws.onerror = () => reject(new Error("connection failed"));
  });
}

const open = { phoenix: openPhoenix, socketio: openSocketIo, bare: openBare }[kind as "phoenix" | "socketio" | "bare"];
for (let i = 0; i < SOCKETS; i += JOIN_BATCH) {
  await Promise.all(Array.from({ length: Math.min(JOIN_BATCH, SOCKETS - i) }, open));
}
process.send!({ type: "ready" });
