/**
 * One client process of the idle-sockets benchmark: opens `sockets` WebSockets to `url`, each
 * joining `topic` with a raw Phoenix v2 `phx_join` (the `phoenix` client's timers and channel
 * objects would cost the client processes more than the server), in batches, then holds them
 * open, sending nothing, until killed. Reports over IPC when every join is answered.
 *
 *   bun clients.ts <url> <sockets> <topic> [join payload, JSON]
 */
const [url, socketsArg, topic, joinPayload = "{}"] = process.argv.slice(2);
const SOCKETS = Number(socketsArg);
/** Sockets connecting at once: enough to keep the server busy, few enough for the listen backlog. */
const BATCH = 200;
const JOIN = JSON.stringify(["1", "1", topic, "phx_join", JSON.parse(joinPayload)]);
const held: WebSocket[] = [];

function open(): Promise<void> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url!);
    ws.onopen = () => ws.send(JOIN);
    ws.onmessage = (message) => {
      const [, ref, , event, payload] = JSON.parse(String(message.data));
      if (ref !== "1" || event !== "phx_reply") return;
      if (payload.status === "ok") resolve();
      else reject(new Error(`join refused: ${JSON.stringify(payload)}`));
      ws.onmessage = null;
    };
    ws.onerror = () => reject(new Error("connection failed"));
    ws.onclose = (event) => reject(new Error(`closed: ${event.code} ${event.reason}`));
    held.push(ws);
  });
}

for (let i = 0; i < SOCKETS; i += BATCH) {
  await Promise.all(Array.from({ length: Math.min(BATCH, SOCKETS - i) }, open));
}
process.send!({ type: "ready" });
export {};
