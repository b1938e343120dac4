import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Presence } from "phoenix";
import { createApp } from "../../src/process/app";
import { postMessage } from "../../src/modules/chat/posting";
import { createRoom } from "../../src/modules/chat/rooms";
import { actorFrom } from "../../src/modules/auth/actor";
import { verifyAccessToken } from "../../src/modules/auth/access-token";
import { call, newAccount, tokenFor } from "../helpers";
import { connect, disconnect, join, push, recorder } from "../support/phoenix";
import { eventually, until } from "../support/wait";

const server = createApp().listen({ hostname: "127.0.0.1", port: 0 });
const base = `ws://127.0.0.1:${server.server!.port}`;
let account: Awaited<ReturnType<typeof newAccount>>;
let aliceToken: string;
let bobToken: string;

beforeAll(async () => {
  account = await newAccount();
  aliceToken = await tokenFor(account.apiKey, { id: "alice", name: "Alice" }, "messaging");
  bobToken = await tokenFor(account.apiKey, { id: "bob", name: "Bob" }, "messaging");
});

afterAll(async () => {
  await server.stop(true);
});

async function actor(token: string) {
  return actorFrom(await verifyAccessToken(token, "messaging"));
}

describe("chat topic", () => {
  test("join sends presence, history and user_joined; a message reaches a second client", async () => {
    const alice = await actor(aliceToken);
    await createRoom(alice, { channelId: "lobby" });
    for (let i = 1; i <= 3; i++) await postMessage(alice, "lobby", { content: `old ${i}` });

    const socketA = connect(base, aliceToken);
    const channelA = socketA.channel("chat:lobby");
    const eventsA = recorder(channelA, [
      "presence_state",
      "presence_diff",
      "archived_message_count",
      "archived_message",
      "user_joined",
      "new_message",
    ]);
    await join(channelA);
    expect(await eventsA.next("archived_message_count")).toEqual({ count: 3 });
    await eventsA.next("archived_message", (m) => m.content === "old 3");
    expect(eventsA.seen.filter((e) => e.event === "archived_message").map((e) => e.payload.content)).toEqual([
      "old 1",
      "old 2",
      "old 3",
    ]);
    const state = await eventsA.next("presence_state");
    expect(Object.keys(state)).toEqual(["alice"]);
    expect(state.alice.metas[0]).toMatchObject({ name: "Alice" });
    expect(typeof state.alice.metas[0].phx_ref).toBe("string");
    expect(await eventsA.next("user_joined")).toEqual({ user: { id: "alice", name: "Alice" } });
    // Order on the wire: presence_state first, then the history.
    const order = eventsA.seen.map((e) => e.event);
    expect(order.indexOf("presence_state")).toBeLessThan(order.indexOf("archived_message_count"));

    const socketB = connect(base, bobToken);
    const channelB = socketB.channel("chat:lobby");
    const eventsB = recorder(channelB, ["new_message", "presence_state"]);
    const presence = new Presence(channelB);
    await join(channelB);
    expect(await eventsA.next("user_joined", (p) => p.user.id === "bob")).toEqual({ user: { id: "bob", name: "Bob" } });
    await eventsB.next("presence_state");
    expect(await eventually(() => presence.list().length === 2)).toBe(true);
    expect(presence.list((id: string) => id).sort()).toEqual(["alice", "bob"]);

    const reply = await push(channelA, "new_message", { content: "hello Bob" });
    expect(reply.status).toBe("ok");
    expect(reply.response.message).toMatchObject({
      content: "hello Bob",
      created_by: "alice",
      created_by_name: "Alice",
      content_type: "text",
    });
    const received = await eventsB.next("new_message", (m) => m.content === "hello Bob");
    expect(received.id).toBe(reply.response.message.id);
    expect(received.inserted_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(await eventsA.next("new_message", (m) => m.content === "hello Bob")).toEqual(received);

    // Stored: REST sees it too.
    const listed = await call("GET", "/api/v1/messaging/rooms/lobby/messages?size=1", {
      headers: { authorization: `Bearer ${bobToken}` },
    });
    expect(listed.body.messages[0].id).toBe(received.id);

    // Bob leaves: Alice's presence loses him.
    const presenceA = new Presence(channelA);
    presenceA.onSync(() => {});
    const diffs = eventsA.seen.length;
    await disconnect(socketB);
    const leave = await eventsA.next("presence_diff", (d) => Object.keys(d.leaves).includes("bob"));
    expect(leave.leaves.bob.metas).toHaveLength(1);
    expect(eventsA.seen.length).toBeGreaterThan(diffs);
    await disconnect(socketA);
  });

  test("a join with presence false is neither listed nor announced, and still hears and posts", async () => {
    const alice = await actor(aliceToken);
    await createRoom(alice, { channelId: "auditorium" });
    const socketA = connect(base, aliceToken);
    const channelA = socketA.channel("chat:auditorium");
    const eventsA = recorder(channelA, ["presence_diff", "user_joined", "user_left", "new_message"]);
    await join(channelA);
    await eventsA.next("user_joined", (p) => p.user.id === "alice");

    const socketB = connect(base, bobToken);
    const channelB = socketB.channel("chat:auditorium", { presence: false });
    const eventsB = recorder(channelB, ["presence_state", "archived_message_count", "new_message"]);
    await join(channelB);
    expect(await eventsB.next("archived_message_count")).toEqual({ count: 0 });
    // Bob's frames are handled in order: his message follows whatever his join announced.
    const posted = await push(channelB, "new_message", { content: "from the back row" });
    expect(posted.status).toBe("ok");
    await eventsA.next("new_message", (m) => m.content === "from the back row");
    const mentionsBob = ({ event, payload }: { event: string; payload: any }) =>
      event === "user_joined" || event === "user_left"
        ? payload.user.id === "bob"
        : event === "presence_diff" && "bob" in { ...payload.joins, ...payload.leaves };
    expect(eventsA.seen.filter(mentionsBob)).toEqual([]);
    expect(eventsB.seen.filter((entry) => entry.event === "presence_state")).toEqual([]);

    // A listed member joining later sees only the listed ones; Bob hears its diff like any broadcast.
    const socketC = connect(base, aliceToken);
    const channelC = socketC.channel("chat:auditorium");
    const eventsC = recorder(channelC, ["presence_state"]);
    await join(channelC);
    expect(Object.keys(await eventsC.next("presence_state"))).toEqual(["alice"]);
    expect((await eventsC.next("presence_state")).alice.metas).toHaveLength(2);

    await push(channelA, "new_message", { content: "to everyone" });
    await eventsB.next("new_message", (m) => m.content === "to everyone");
    await new Promise((resolve) => channelB.leave().receive("ok", resolve));
    // Alice's own message, sent after Bob's leave was answered, comes after anything his leave announced.
    await push(channelA, "new_message", { content: "after Bob left" });
    await eventsA.next("new_message", (m) => m.content === "after Bob left");
    expect(eventsA.seen.filter(mentionsBob)).toEqual([]);

    const refused = socketB.channel("chat:auditorium", { presence: "no" });
    await expect(join(refused)).rejects.toMatchObject({ response: { reason: "bad_request" } });
    await disconnect(socketA);
    await disconnect(socketB);
    await disconnect(socketC);
  });

  test("polls: options get ids, votes are stored, changed and broadcast", async () => {
    const alice = await actor(aliceToken);
    await createRoom(alice, { channelId: "polls" });
    const socketA = connect(base, aliceToken);
    const socketB = connect(base, bobToken);
    const channelA = socketA.channel("chat:polls");
    const channelB = socketB.channel("chat:polls");
    const eventsA = recorder(channelA, ["new_message", "new_vote"]);
    await join(channelA);
    await join(channelB);

    const created = await push(channelB, "new_message", {
      content: "Lunch?",
      content_type: "poll",
      options: ["Pizza", "Soup"],
    });
    expect(created.status).toBe("ok");
    const poll = await eventsA.next("new_message", (m) => m.content_type === "poll");
    expect(poll.options.map((o: any) => o.text)).toEqual(["Pizza", "Soup"]);
    expect(poll.options.every((o: any) => Number.isInteger(o.id) && o.vote_count === 0)).toBe(true);
    const [pizza, soup] = poll.options;

    const voted = await push(channelB, "new_vote", { message_id: poll.id, answer: pizza.id });
    expect(voted).toEqual({ status: "ok", response: { poll_answer: { answer: pizza.id, user_id: "bob" } } });
    const broadcast = await eventsA.next("new_vote", (v) => v.answer === pizza.id);
    expect(broadcast).toMatchObject({ message_id: poll.id, user_id: "bob" });
    expect(broadcast.options.find((o: any) => o.id === pizza.id).vote_count).toBe(1);

    await push(channelB, "new_vote", { message_id: poll.id, answer: soup.id });
    const changed = await eventsA.next("new_vote", (v) => v.answer === soup.id);
    expect(changed.options.map((o: any) => o.vote_count)).toEqual([0, 1]);

    const foreign = await push(channelB, "new_vote", { message_id: poll.id, answer: 999999 });
    expect(foreign.status).toBe("error");
    expect(foreign.response.reason).toBe("validation_failed");
    const notPoll = (await push(channelA, "new_message", { content: "plain" })).response.message;
    expect((await push(channelB, "new_vote", { message_id: notPoll.id, answer: pizza.id })).response.reason).toBe(
      "validation_failed",
    );

    const votes = await call("GET", `/api/v1/messaging/rooms/polls/messages/${poll.id}/poll/votes`, {
      headers: { authorization: `Bearer ${aliceToken}` },
    });
    expect(votes.body).toEqual({ votes: [{ answer: soup.id, user_id: "bob" }] });
    await disconnect(socketA);
    await disconnect(socketB);
  });

  test("REST edits and deletes are broadcast to the room", async () => {
    const alice = await actor(aliceToken);
    await createRoom(alice, { channelId: "edits" });
    const socket = connect(base, bobToken);
    const channel = socket.channel("chat:edits");
    const events = recorder(channel, ["message_updated", "message_deleted"]);
    await join(channel);
    const message = await postMessage(alice, "edits", { content: "typo" });
    const reply = await postMessage(alice, "edits", { content: "a reply", parent_id: message.id });
    const auth = { authorization: `Bearer ${aliceToken}` };

    const edited = await call("PUT", `/api/v1/messaging/rooms/edits/messages/${message.id}`, {
      body: { content: "fixed" },
      headers: auth,
    });
    expect(edited.status).toBe(200);
    expect(await events.next("message_updated")).toEqual(edited.body);

    const deleted = await call("DELETE", "/api/v1/messaging/rooms/edits/messages", {
      body: { message_ids: [message.id] },
      headers: auth,
    });
    expect(deleted.status).toBe(200);
    expect(await events.next("message_deleted")).toEqual({ channel_id: "edits", message_ids: [message.id, reply.id] });
    await disconnect(socket);
  });

  test("a closed room, an unknown room and an unknown topic refuse the join", async () => {
    const alice = await actor(aliceToken);
    await createRoom(alice, { channelId: "private", allowedUserIds: ["carol"] });
    const socket = connect(base, bobToken);
    await expect(join(socket.channel("chat:private"))).rejects.toMatchObject({ response: { reason: "forbidden" } });
    await expect(join(socket.channel("chat:nowhere"))).rejects.toMatchObject({ response: { reason: "not_found" } });
    await expect(join(socket.channel("lobby:x"))).rejects.toMatchObject({ response: { reason: "unmatched topic" } });
    // The socket still works after refusals.
    await join(socket.channel("chat:lobby"));
    await disconnect(socket);
  });

  test("another account's room does not exist for the caller", async () => {
    const other = await newAccount();
    const otherToken = await tokenFor(other.apiKey, { id: "alice", name: "Other Alice" }, "messaging");
    const socket = connect(base, otherToken);
    await expect(join(socket.channel("chat:lobby"))).rejects.toMatchObject({ response: { reason: "not_found" } });
    await disconnect(socket);
  });

  test("an inactive room can be joined and read but not written", async () => {
    const alice = await actor(aliceToken);
    await createRoom(alice, { channelId: "archive", status: "inactive" });
    const socket = connect(base, aliceToken);
    const channel = socket.channel("chat:archive");
    await join(channel);
    const refused = await push(channel, "new_message", { content: "hi" });
    expect(refused).toMatchObject({ status: "error", response: { reason: "forbidden" } });
    await disconnect(socket);
  });
});

describe("rtc topic", () => {
  test("relays any event to the other members only, stamped with the sender, without storing it", async () => {
    const socketA = connect(base, aliceToken);
    const socketB = connect(base, bobToken);
    const channelA = socketA.channel("rtc:call-1");
    const channelB = socketB.channel("rtc:call-1");
    const eventsA = recorder(channelA, ["offer"]);
    const eventsB = recorder(channelB, ["offer", "presence_state"]);
    await join(channelA);
    await join(channelB);
    const state = await eventsB.next("presence_state");
    expect(Object.keys(state).sort()).toEqual(["alice", "bob"]);
    const reply = await push(channelA, "offer", { sdp: "v=0", from: "mallory" });
    expect(reply.status).toBe("ok");
    expect(await eventsB.next("offer")).toEqual({ sdp: "v=0", from: "alice" });
    await Bun.sleep(100);
    expect(eventsA.seen).toHaveLength(0);
    await disconnect(socketA);
    await disconnect(socketB);
  });
});

describe("raw frames", () => {
  function open(token: string): Promise<WebSocket> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(`${base}/api/v1/messaging/websocket?token=${token}&vsn=2.0.0`);
      ws.onopen = () => resolve(ws);
      ws.onerror = () => reject(new Error("no connection"));
    });
  }
  function nextMessage(ws: WebSocket): Promise<any> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("no frame")), 5_000);
      ws.addEventListener(
        "message",
        (event) => {
          clearTimeout(timer);
          resolve(JSON.parse(String(event.data)));
        },
        { once: true },
      );
    });
  }
  function closed(ws: WebSocket): Promise<number> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("not closed")), 5_000);
      ws.addEventListener("close", (event) => {
        clearTimeout(timer);
        resolve(event.code);
      });
    });
  }

  test("a heartbeat is answered with phx_reply ok", async () => {
    const ws = await open(aliceToken);
    ws.send(JSON.stringify([null, "7", "phoenix", "heartbeat", {}]));
    expect(await nextMessage(ws)).toEqual([null, "7", "phoenix", "phx_reply", { status: "ok", response: {} }]);
    ws.close();
  });

  test.each([
    ["not JSON", "hello"],
    ["a JSON object", '{"topic":"phoenix"}'],
    ["a short array", '[null,"1","phoenix"]'],
    ["a number topic", '[null,"1",5,"heartbeat",{}]'],
  ])("%s closes the socket with 1003 and the server keeps serving", async (_name, frame) => {
    const ws = await open(aliceToken);
    const done = closed(ws);
    ws.send(frame);
    expect(await done).toBe(1003);
    const again = await open(aliceToken);
    again.send(JSON.stringify([null, "1", "phoenix", "heartbeat", {}]));
    expect((await nextMessage(again))[4].status).toBe("ok");
    again.close();
  });

  test("a binary frame closes with 1003; an oversized frame with 1009", async () => {
    const binary = await open(aliceToken);
    const binaryClosed = closed(binary);
    binary.send(new Uint8Array([1, 2, 3]));
    expect(await binaryClosed).toBe(1003);
    const big = await open(aliceToken);
    const bigClosed = closed(big);
    big.send(JSON.stringify([null, "1", "phoenix", "heartbeat", { pad: "x".repeat(70_000) }]));
    expect(await bigClosed).toBe(1009);
  });

  test("a 10 KB topic is refused as too long with an error reply, and the socket stays open", async () => {
    const socket = connect(base, aliceToken);
    const refused = await join(socket.channel(`rtc:${"x".repeat(10_000)}`)).catch(
      (error: { response: unknown }) => error.response,
    );
    expect(refused).toEqual({ reason: "topic too long", message: "topic: at most 256 characters, got 10004" });
    // An event name past its cap is refused the same way, on a topic the socket has joined.
    const channel = socket.channel("rtc:short");
    await join(channel);
    expect(await push(channel, "e".repeat(129), {})).toEqual({
      status: "error",
      response: { reason: "event too long", message: "event: at most 128 characters, got 129" },
    });
    expect((await push(channel, "offer", {})).status).toBe("ok");
    expect(socket.isConnected()).toBe(true);
    await disconnect(socket);
  });

  test("well-formed frames with bad content get an error reply", async () => {
    const ws = await open(aliceToken);
    ws.send(JSON.stringify(["1", "1", "chat:lobby", "phx_join", {}]));
    expect((await nextMessage(ws))[4]).toEqual({ status: "ok", response: {} });
    // Skip the join's pushes and broadcasts.
    await Bun.sleep(200);
    const replies: any[] = [];
    ws.addEventListener("message", (event) => {
      const frame = JSON.parse(String(event.data));
      if (frame[3] === "phx_reply") replies.push(frame);
    });
    ws.send(JSON.stringify(["1", "2", "chat:lobby", "new_message", { content: "" }]));
    ws.send(JSON.stringify(["1", "3", "chat:lobby", "new_message", { content: 42 }]));
    ws.send(
      JSON.stringify([
        "1",
        "4",
        "chat:lobby",
        "new_message",
        { content: "poll?", content_type: "poll", options: ["one"] },
      ]),
    );
    ws.send(JSON.stringify(["1", "5", "chat:lobby", "dance", {}]));
    ws.send(JSON.stringify(["1", "6", "chat:lobby", "new_vote", { message_id: "x", answer: 1 }]));
    ws.send(JSON.stringify(["1", "7", "chat:lobby", "new_message", "just a string"]));
    ws.send(JSON.stringify(["1", "8", "chat:lobby", "new_message", { content: "x".repeat(10_001) }]));
    ws.send(JSON.stringify(["9", "9", "chat:elsewhere", "new_message", { content: "not joined" }]));
    await until(
      () => replies.length,
      (count) => count >= 8,
      10_000,
      20,
    );
    expect(replies.map((frame) => [frame[1], frame[4].status, frame[4].response.reason])).toEqual([
      ["2", "error", "validation_failed"],
      ["3", "error", "validation_failed"],
      ["4", "error", "validation_failed"],
      ["5", "error", "bad_request"],
      ["6", "error", "validation_failed"],
      ["7", "error", "validation_failed"],
      ["8", "error", "validation_failed"],
      ["9", "error", "unmatched topic"],
    ]);
    ws.close();
  });

  test("joining again replaces the earlier join; phx_leave is answered, then phx_close", async () => {
    const ws = await open(aliceToken);
    const frames: any[] = [];
    ws.addEventListener("message", (event) => frames.push(JSON.parse(String(event.data))));
    const replyTo = (ref: string) =>
      until<any>(() => frames.find((f) => f[1] === ref && f[3] === "phx_reply"), Boolean, 10_000, 20);
    ws.send(JSON.stringify(["1", "1", "rtc:rejoin", "phx_join", {}]));
    expect((await replyTo("1"))[4].status).toBe("ok");
    ws.send(JSON.stringify(["2", "2", "rtc:rejoin", "phx_join", {}]));
    expect((await replyTo("2"))[4].status).toBe("ok");
    expect(frames).toContainEqual(["1", "1", "rtc:rejoin", "phx_close", {}]);
    ws.send(JSON.stringify(["2", "3", "rtc:rejoin", "phx_leave", {}]));
    expect(await replyTo("3")).toEqual(["2", "3", "rtc:rejoin", "phx_reply", { status: "ok", response: {} }]);
    await eventually(() => frames.some((f) => f[0] === "2" && f[3] === "phx_close"));
    expect(frames).toContainEqual(["2", "2", "rtc:rejoin", "phx_close", {}]);
    ws.send(JSON.stringify(["2", "4", "rtc:rejoin", "offer", {}]));
    expect((await replyTo("4"))[4]).toEqual({ status: "error", response: { reason: "unmatched topic" } });
    ws.close();
  });

  test("the upgrade needs a valid messaging token", async () => {
    const url = `http://127.0.0.1:${server.server!.port}/api/v1/messaging/websocket`;
    const upgrade = {
      connection: "Upgrade",
      upgrade: "websocket",
      "sec-websocket-version": "13",
      "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
    };
    const none = await fetch(url, { headers: upgrade });
    expect(none.status).toBe(401);
    expect((await none.json()).error.code).toBe("unauthorized");
    const bad = await fetch(`${url}?token=nope`, { headers: upgrade });
    expect(bad.status).toBe(401);
    // Media tokens are signed RS256 only (what Jitsi verifies), so they come from an RS256 account.
    const mediaOnly = await tokenFor((await newAccount("RS256")).apiKey, { id: "alice" }, "media");
    expect((await fetch(`${url}?token=${mediaOnly}`, { headers: upgrade })).status).toBe(403);
    const plain = await fetch(`${url}?token=${aliceToken}`);
    expect(plain.status).toBe(404);
    expect((await plain.json()).error.code).toBe("not_found");
    const oldProtocol = await fetch(`${url}?token=${aliceToken}&vsn=1.0.0`, { headers: upgrade });
    expect(oldProtocol.status).toBe(400);
  });
});
