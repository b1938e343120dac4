/**
 * Socket payloads are checked against chat's TypeBox models before the chat channel sees them,
 * and a channel id is judged by one model on REST and on the socket alike.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { createApp } from "../../src/process/app";
import { call, newAccount, tokenFor } from "../helpers";
import { connect, disconnect, join, push } from "../support/phoenix";

const server = createApp().listen({ hostname: "127.0.0.1", port: 0 });
const base = `ws://127.0.0.1:${server.server!.port}`;
let token: string;
const CHANNEL_ID_REASON = "channel_id: 1 to 128 characters, without slashes or control characters";

beforeAll(async () => {
  token = await tokenFor((await newAccount()).apiKey, { id: "alice", name: "Alice" }, "messaging");
});

afterAll(async () => {
  await server.stop(true);
});

const rest = (method: string, path: string, body?: unknown) =>
  call(method, path, { headers: { authorization: `Bearer ${token}` }, body });

test("a channel id is judged the same by REST and by the socket, on chat and on rtc", async () => {
  const socket = connect(base, token);
  const joined = async (topic: string) =>
    join(socket.channel(topic)).then(
      () => "ok",
      (refusal: { response: unknown }) => refusal.response,
    );
  for (const refused of ["a/b", "a\u0001b", "tab\there", "x".repeat(129)]) {
    expect(await rest("POST", "/api/v1/messaging/rooms/create", { channel_id: refused })).toMatchObject({
      status: 400,
      body: { error: { code: "bad_request", message: CHANNEL_ID_REASON } },
    });
    const answer = await rest("GET", `/api/v1/messaging/rooms/${encodeURIComponent(refused)}`);
    expect(answer).toMatchObject({ status: 400, body: { error: { message: `params.${CHANNEL_ID_REASON}` } } });
    for (const prefix of ["chat", "rtc"]) {
      expect(await joined(`${prefix}:${refused}`)).toEqual({ reason: "validation_failed", message: CHANNEL_ID_REASON });
    }
  }
  for (const admitted of ["a:b", "lounge ☕", "x".repeat(128)]) {
    expect((await rest("POST", "/api/v1/messaging/rooms/create", { channel_id: admitted })).status).toBe(201);
    expect((await rest("GET", `/api/v1/messaging/rooms/${encodeURIComponent(admitted)}`)).status).toBe(200);
    for (const prefix of ["chat", "rtc"]) expect(await joined(`${prefix}:${admitted}`)).toBe("ok");
  }
  await disconnect(socket);
}, 30_000);

test("a push its model refuses is answered with an error naming the field, before the channel sees it", async () => {
  await rest("POST", "/api/v1/messaging/rooms/create", { channel_id: "checked" });
  const socket = connect(base, token);
  const channel = socket.channel("chat:checked");
  await join(channel);
  const refusals = [
    [{ content: "   " }, "content: a string of 1 to 10000 characters, not only white space"],
    [{ content: "x", parent_id: "seven" }, "parent_id: null, or a whole number from 1 to 2147483647"],
    [{ content: "x", content_type: "Text/HTML" }, "content_type: lower-case letters, digits and _ . + / -, at most 64"],
    [{ content: "q", content_type: "poll", options: ["a", " "] }, "options.1: each option is a non-empty string"],
    [{ content: "q", content_type: "poll", options: ["a"] }, "options: a poll has 2 to 20 options"],
  ] as const;
  for (const [payload, reason] of refusals) {
    const answer = await push(channel, "new_message", payload);
    expect(answer).toMatchObject({ status: "error", response: { reason: "validation_failed" } });
    expect(answer.response.message).toStartWith(reason);
  }
  expect(await push(channel, "new_vote", { message_id: 1 })).toEqual({
    status: "error",
    response: { reason: "validation_failed", message: "answer: a whole number from 1 to 2147483647" },
  });
  expect(await push(channel, "dance", {})).toEqual({
    status: "error",
    response: { reason: "bad_request", message: 'unknown event "dance" on a chat topic; send new_message or new_vote' },
  });
  // Nothing refused was stored. As before, members the model does not name are ignored, and an id
  // may come as a numeric string, read as the number (as REST reads one).
  const stored = await push(channel, "new_message", { content: "fine", extra: true });
  expect(stored.response.message).toMatchObject({ content: "fine", content_type: "text", parent_id: null });
  const reply = await push(channel, "new_message", { content: "re", parent_id: String(stored.response.message.id) });
  expect(reply.response.message.parent_id).toBe(stored.response.message.id);
  const listed = await rest("GET", "/api/v1/messaging/rooms/checked/messages");
  expect(listed.body.messages.map((message: { content: string }) => message.content)).toEqual(["fine"]);
  const presence = socket.channel("chat:checked", { presence: "no" });
  await expect(join(presence)).rejects.toMatchObject({
    response: { reason: "bad_request", message: "presence: true or false (a join with presence false is not listed)" },
  });
  await disconnect(socket);
}, 30_000);
