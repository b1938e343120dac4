/**
 * SIGTERM with sockets open, against the supervisor as an operator runs it and the unmodified
 * phoenix client: the push in flight finishes and is answered, pushes not started get an error
 * reply, clients are closed with a code they reconnect on, and the process exits as soon as
 * that is done rather than after the whole grace period.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { eq } from "drizzle-orm";
import { Socket } from "phoenix";
import { db } from "../../src/db/client";
import { chatMessages } from "../../src/modules/chat/schema";
const CLOSE_SERVICE_RESTART = 1012;
import { newAccount, tokenFor } from "../helpers";
import { join, push } from "../support/phoenix";
import { freePort } from "../support/ports";
import { until } from "../support/wait";
import { lockTable } from "../support/table-lock";

const GRACE_MS = 20_000;
const entry = new URL("../../src/index.ts", import.meta.url).pathname;

let port: number;
let supervisor: ReturnType<typeof Bun.spawn>;
let token: string;

beforeAll(async () => {
  port = await freePort();
  const account = await newAccount();
  token = await tokenFor(account.apiKey, { id: "alice", name: "Alice" }, "messaging");
  supervisor = Bun.spawn([process.execPath, entry], {
    env: {
      ...process.env,
      LOG_LEVEL: "silent",
      PORT: String(port),
      HOST: "127.0.0.1",
      API_PROCESSES: "1",
      SIP_ENABLED: "false",
      SHUTDOWN_GRACE_MS: String(GRACE_MS),
      REDIS_PREFIX: `parley-test-shutdown-${crypto.randomUUID()}`,
    },
    stdout: "ignore",
    stderr: "inherit",
  });
  const ready = await until(
    () =>
      fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(2_000) }).then(
        (r) => r.ok,
        () => false,
      ),
    Boolean,
    45_000,
    100,
  );
  if (!ready) throw new Error("the supervisor never became ready");
  const created = await fetch(`http://127.0.0.1:${port}/api/v1/messaging/rooms/create`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ channel_id: "drain" }),
    signal: AbortSignal.timeout(5_000),
  });
  expect(created.status).toBe(201);
}, 60_000);

afterAll(() => supervisor.kill("SIGKILL"));

test("SIGTERM: the push in flight is answered, later ones refused, clients reconnect, the process exits", async () => {
  // Counts the connections the client opens: a second one is its reconnect.
  let opened = 0;
  class CountingWebSocket extends WebSocket {
    constructor(url: string | URL, protocols?: string | string[]) {
      super(url, protocols);
      opened++;
    }
  }
  const closes: number[] = [];
  const socket = new Socket(`ws://127.0.0.1:${port}/api/v1/messaging`, {
    params: { token },
    transport: CountingWebSocket,
    reconnectAfterMs: () => 100,
    timeout: 10_000,
  });
  socket.onClose((event: CloseEvent) => {
    closes.push(event.code);
  });
  socket.connect();
  const channel = socket.channel("chat:drain");
  await join(channel);

  // A lock on the messages table holds the first push in flight for as long as the test likes.
  const lock = await lockTable("chat_messages");
  try {
    const inFlight = push(channel, "new_message", { content: "in flight" });
    await Bun.sleep(300);
    const queued = push(channel, "new_message", { content: "queued behind it" });
    await Bun.sleep(100);
    const signalled = Date.now();
    supervisor.kill("SIGTERM");
    await Bun.sleep(500);

    // Sent while the server drains, and answered while the first push still waits on the lock.
    const late = await push(channel, "new_message", { content: "sent while draining" });
    expect(late).toEqual({ status: "error", response: { reason: "shutting_down", message: expect.any(String) } });
    expect(closes).toEqual([]);

    lock.release();
    const acknowledged = await inFlight;
    expect(acknowledged.status).toBe("ok");
    expect(await queued).toEqual({
      status: "error",
      response: { reason: "shutting_down", message: expect.any(String) },
    });

    const exited = await Promise.race([supervisor.exited, Bun.sleep(GRACE_MS / 2).then(() => "still running")]);
    expect(exited).toBe(0);
    // Well before the grace period: only the held push was waited for.
    expect(Date.now() - signalled).toBeLessThan(GRACE_MS / 4);
    expect(closes[0]).toBe(CLOSE_SERVICE_RESTART);
    // The client did not take the close as final: it tried to connect again.
    expect(
      await until(
        () => opened,
        (count) => count >= 2,
        5_000,
      ),
    ).toBeGreaterThanOrEqual(2);

    // What was acknowledged is stored; what was refused is not.
    const stored = await db
      .select({ id: chatMessages.id, content: chatMessages.content })
      .from(chatMessages)
      .where(eq(chatMessages.id, acknowledged.response.message.id));
    expect(stored).toEqual([{ id: acknowledged.response.message.id, content: "in flight" }]);
    const all = (await db.select({ content: chatMessages.content }).from(chatMessages)).map((row) => row.content);
    expect(all).not.toContain("queued behind it");
    expect(all).not.toContain("sent while draining");
  } finally {
    socket.disconnect();
    await lock.end();
  }
}, 40_000);
