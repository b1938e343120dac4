/**
 * How chat pushes are written: a burst from several sockets is stored and broadcast in the
 * order each socket sent it, every ok reply names a stored row, a refused push in the
 * middle of a burst leaves the others alone, and a message waiting on the database does not
 * hold up its socket's other frames.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { eq, inArray } from "drizzle-orm";
import { createApp } from "../../src/process/app";
import { db } from "../../src/db/client";
import { chatMessages } from "../../src/modules/chat/schema";
import { aliceAndBob } from "../support/chat-users";
import { connect, disconnect, join, push, recorder } from "../support/phoenix";
import { lockTable } from "../support/table-lock";

const server = createApp().listen({ hostname: "127.0.0.1", port: 0 });
const base = `ws://127.0.0.1:${server.server!.port}`;
let aliceToken: string;
let bobToken: string;

beforeAll(async () => {
  ({ aliceToken, bobToken } = await aliceAndBob(["burst", "held"]));
});

afterAll(() => server.stop(true));

test("a burst from two sockets: each ok names a stored row, broadcasts in sender order, a bad push fails", async () => {
  const socketA = connect(base, aliceToken);
  const socketB = connect(base, bobToken);
  const watcher = connect(base, bobToken);
  const channelA = socketA.channel("chat:burst");
  const channelB = socketB.channel("chat:burst");
  const watching = watcher.channel("chat:burst");
  const seen = recorder(watching, ["new_message"]);
  await Promise.all([join(channelA), join(channelB), join(watching)]);

  const pushes = Array.from({ length: 40 }, (_, i) => [
    push(channelA, "new_message", i === 20 ? { content: "" } : { content: `a ${i}` }),
    push(channelB, "new_message", { content: `b ${i}` }),
  ]).flat();
  const replies = await Promise.all(pushes);

  const refused = replies.filter((reply) => reply.status !== "ok");
  expect(refused).toEqual([
    { status: "error", response: { reason: "validation_failed", message: expect.any(String) } },
  ]);
  const ids = replies.filter((reply) => reply.status === "ok").map((reply) => reply.response.message.id as number);
  expect(new Set(ids).size).toBe(79);
  const stored = await db
    .select({ id: chatMessages.id, content: chatMessages.content })
    .from(chatMessages)
    .where(inArray(chatMessages.id, ids));
  expect(stored).toHaveLength(79);

  await seen.next("new_message", (message) => message.content === "b 39");
  await seen.next("new_message", (message) => message.content === "a 39");
  const broadcast = seen.seen.map((entry) => entry.payload as { id: number; content: string });
  for (const sender of ["a", "b"]) {
    const mine = broadcast.filter((message) => message.content.startsWith(`${sender} `));
    const expected = Array.from({ length: 40 }, (_, i) => `${sender} ${i}`).filter((content) => content !== "a 20");
    expect(mine.map((message) => message.content)).toEqual(expected);
    // Stored in the order sent: ids rise with it.
    expect(mine.map((message) => message.id)).toEqual([...mine.map((message) => message.id)].sort((x, y) => x - y));
  }
  await Promise.all([disconnect(socketA), disconnect(socketB), disconnect(watcher)]);
});

test("a message waiting on the database does not hold up the socket's next frames; its reply awaits it", async () => {
  const socket = connect(base, aliceToken);
  const chat = socket.channel("chat:held");
  const call = socket.channel("rtc:held-call");
  await join(chat);
  await join(call);

  const lock = await lockTable("chat_messages");
  try {
    let stored = false;
    const held = push(chat, "new_message", { content: "held" }).then((reply) => {
      stored = true;
      return reply;
    });
    // Relayed while the message still waits on the lock.
    expect(await push(call, "ping", { n: 1 })).toEqual({ status: "ok", response: {} });
    expect(stored).toBe(false);
    lock.release();
    const reply = await held;
    expect(reply.status).toBe("ok");
    const rows = await db
      .select({ content: chatMessages.content })
      .from(chatMessages)
      .where(eq(chatMessages.id, reply.response.message.id));
    expect(rows).toEqual([{ content: "held" }]);
  } finally {
    await lock.end();
    await disconnect(socket);
  }
});
