/**
 * With the Redis broker and Redis gone, a chat message is still stored, delivered to the
 * room's sockets on this process and acknowledged: the copy for other processes waits for
 * Redis, not the writer, and nothing acknowledged lives only in Redis.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Subprocess } from "bun";
import { eq } from "drizzle-orm";
import { db } from "../../src/db/client";
import { chatMessages } from "../../src/modules/chat/schema";
import { aliceAndBob } from "../support/chat-users";
import { connect, disconnect, join, push, recorder } from "../support/phoenix";
import { startApiProcess } from "../support/api-process";
import { type PrivateRedis, privateRedis } from "../support/redis-server";

let redis: PrivateRedis;
let api: Subprocess;
let base: string;
let aliceToken: string;
let bobToken: string;

beforeAll(async () => {
  ({ aliceToken, bobToken } = await aliceAndBob(["no-redis"]));
  redis = await privateRedis();
  const started = await startApiProcess({ REDIS_URL: redis.url, REALTIME_BROKER: "redis" });
  api = started.child;
  base = started.ws;
}, 30_000);

afterAll(async () => {
  api?.kill("SIGKILL");
  await api?.exited;
  await redis?.kill();
});

test("a message pushed while Redis is down is stored, reaches the room on this process, is acknowledged", async () => {
  const alice = connect(base, aliceToken);
  const bob = connect(base, bobToken);
  const channelA = alice.channel("chat:no-redis");
  const channelB = bob.channel("chat:no-redis");
  const seen = recorder(channelB, ["new_message"]);
  await join(channelA);
  await join(channelB);

  await redis.kill();
  const reply = await push(channelA, "new_message", { content: "while Redis is down" });
  expect(reply.status).toBe("ok");
  expect((await seen.next("new_message")).id).toBe(reply.response.message.id);
  const rows = await db
    .select({ content: chatMessages.content })
    .from(chatMessages)
    .where(eq(chatMessages.id, reply.response.message.id));
  expect(rows).toEqual([{ content: "while Redis is down" }]);
  await Promise.all([disconnect(alice), disconnect(bob)]);
});
