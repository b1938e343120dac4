import { beforeAll, describe, expect, test } from "bun:test";
import { sql } from "drizzle-orm";
import { db } from "../../src/db/client";
import { chatChannel } from "../../src/modules/chat/channel";
import { postMessage } from "../../src/modules/chat/posting";
import { actorFrom } from "../../src/modules/auth/actor";
import { verifyAccessToken } from "../../src/modules/auth/access-token";
import { assertPush } from "../../src/realtime/payloads";
import { call, newAccount, tokenFor } from "../helpers";

let account: Awaited<ReturnType<typeof newAccount>>;
const tokens: Record<string, string> = {};

const as = (user: string) => ({ authorization: `Bearer ${tokens[user]}` });
const get = (user: string, path: string) => call("GET", path, { headers: as(user) });
const send = (user: string, method: string, path: string, body?: unknown) =>
  call(method, path, { headers: as(user), body });

/** Posts as a `new_message` push does: checked against its model by the socket's hook, then handed to the service. */
async function post(user: string, channelId: string, message: Record<string, unknown>) {
  const checked = assertPush(chatChannel, "new_message", message);
  return postMessage(actorFrom(await verifyAccessToken(tokens[user]!, "messaging")), channelId, checked as never);
}

beforeAll(async () => {
  account = await newAccount();
  for (const [id, name, moderator] of [
    ["alice", "Alice Liddell", false],
    ["bob", "Bob Dylan", false],
    ["carol", "Carol 100%_sure", false],
    ["mod", "Moderator", true],
  ] as const) {
    tokens[id] = await tokenFor(account.apiKey, { id, name, moderator }, "messaging");
  }
});

describe("rooms", () => {
  test("create, fetch and list with the spec's fields; a duplicate is 409", async () => {
    const created = await send("alice", "POST", "/api/v1/messaging/rooms/create", { channel_id: "general" });
    expect(created.status).toBe(201);
    const room = created.body.room;
    expect(room).toMatchObject({
      app_id: account.accountId,
      created_by: "alice",
      session_id: "general",
      allowed_user_ids: [],
      status: "active",
    });
    expect(Number.isInteger(room.id)).toBe(true);
    expect(Number.isInteger(room.owner_id)).toBe(true);
    expect((await get("bob", "/api/v1/messaging/rooms/general")).body).toEqual({ room });
    expect((await send("bob", "POST", "/api/v1/messaging/rooms/create", { channel_id: "general" })).status).toBe(409);
    const listed = await get("bob", "/api/v1/messaging/rooms");
    expect(listed.body.rooms.map((r: any) => r.session_id)).toContain("general");
  });

  test("a restricted room is invisible and closed to others; the owner adds and removes users", async () => {
    const created = await send("alice", "POST", "/api/v1/messaging/rooms/create", {
      channel_id: "secret",
      allowed_user_ids: ["alice"],
    });
    expect(created.status).toBe(201);
    expect((await get("bob", "/api/v1/messaging/rooms/secret")).status).toBe(403);
    expect((await get("bob", "/api/v1/messaging/rooms")).body.rooms.map((r: any) => r.session_id)).not.toContain(
      "secret",
    );
    expect((await send("bob", "POST", "/api/v1/messaging/rooms/secret/users/bob")).status).toBe(403);

    const added = await send("alice", "POST", "/api/v1/messaging/rooms/secret/users/bob");
    expect(added.status).toBe(200);
    expect(added.body.room.allowed_user_ids).toEqual(["alice", "bob"]);
    expect(
      (await send("alice", "POST", "/api/v1/messaging/rooms/secret/users/bob")).body.room.allowed_user_ids,
    ).toEqual(["alice", "bob"]);
    expect((await get("bob", "/api/v1/messaging/rooms/secret")).status).toBe(200);
    expect((await get("bob", "/api/v1/rooms/secret/users")).body).toEqual({
      users: [
        { id: "alice", name: "Alice Liddell" },
        { id: "bob", name: "Bob Dylan" },
      ],
    });
    expect((await get("bob", "/api/v1/messaging/rooms/secret/users/alice")).body).toEqual({
      user: { id: "alice", name: "Alice Liddell" },
    });
    expect((await get("bob", "/api/v1/messaging/rooms/secret/users/carol")).status).toBe(404);

    const removed = await send("alice", "DELETE", "/api/v1/messaging/rooms/secret/users/bob");
    expect(removed.body.room.allowed_user_ids).toEqual(["alice"]);
    expect((await get("bob", "/api/v1/messaging/rooms/secret")).status).toBe(403);
    expect((await send("alice", "DELETE", "/api/v1/messaging/rooms/secret/users/bob")).status).toBe(404);
    // A moderator may enter any room of the account.
    expect((await get("mod", "/api/v1/messaging/rooms/secret")).status).toBe(200);
  });

  test("another account's room is 404, never 403", async () => {
    const other = await newAccount();
    const stranger = await tokenFor(other.apiKey, { id: "alice" }, "messaging");
    const answer = await call("GET", "/api/v1/messaging/rooms/general", {
      headers: { authorization: `Bearer ${stranger}` },
    });
    expect(answer.status).toBe(404);
    expect(answer.body.error.code).toBe("not_found");
    const messages = await call("GET", "/api/v1/messaging/rooms/general/messages", {
      headers: { authorization: `Bearer ${stranger}` },
    });
    expect(messages.status).toBe(404);
  });

  test("credentials: none is 401, an API key is 401, a media-only token is 403", async () => {
    expect((await call("GET", "/api/v1/messaging/rooms")).status).toBe(401);
    expect(
      (await call("GET", "/api/v1/messaging/rooms", { headers: { authorization: `Bearer ${account.apiKey}` } })).status,
    ).toBe(401);
    // Media tokens are signed RS256 only (what Jitsi verifies), so they come from an RS256 account.
    const media = await tokenFor((await newAccount("RS256")).apiKey, { id: "alice" }, "media");
    expect(
      (await call("GET", "/api/v1/messaging/rooms", { headers: { authorization: `Bearer ${media}` } })).status,
    ).toBe(403);
  });

  test("bad input is a 4xx with the error shape", async () => {
    for (const body of [{}, { channel_id: "" }, { channel_id: "a", status: "paused" }, { channel_id: 5 }]) {
      const answer = await send("alice", "POST", "/api/v1/messaging/rooms/create", body);
      expect(answer.status).toBe(400);
      expect(answer.body.error.code).toBe("bad_request");
    }
    expect((await send("alice", "POST", "/api/v1/messaging/rooms/create", { channel_id: "a\u0001b" })).body).toEqual({
      error: { code: "bad_request", message: "channel_id: 1 to 128 characters, without slashes or control characters" },
    });
    expect((await get("alice", "/api/v1/messaging/rooms/general/messages/abc")).status).toBe(400);
    expect((await get("alice", "/api/v1/messaging/rooms/general/messages/1.5")).status).toBe(400);
    expect((await get("alice", "/api/v1/messaging/rooms/general/messages/99999999999")).status).toBe(400);
    expect((await get("alice", "/api/v1/messaging/rooms/general/messages?size=101")).status).toBe(400);
    expect((await get("alice", "/api/v1/messaging/rooms/general/messages?size=0")).status).toBe(400);
    expect((await get("alice", "/api/v1/messaging/rooms/general/messages?message_ids=1,x")).status).toBe(422);
    expect((await get("alice", "/api/v1/messaging/rooms/general/messages/2147483647")).status).toBe(404);
  });
});

describe("messages", () => {
  let ids: number[] = [];

  beforeAll(async () => {
    await send("alice", "POST", "/api/v1/messaging/rooms/create", { channel_id: "history" });
    ids = [];
    for (let i = 1; i <= 25; i++)
      ids.push((await post(i % 2 ? "alice" : "bob", "history", { content: `message ${i}` })).id);
    // Two older days, to see grouping.
    await db.execute(sql`update chat_messages set inserted_at = '2026-01-02T10:00:00Z' where id = ${ids[0]}`);
    await db.execute(sql`update chat_messages set inserted_at = '2026-01-03T23:59:59Z' where id = ${ids[1]}`);
  });

  test("lists newest first, 20 by default, with size and offset", async () => {
    const first = await get("bob", "/api/v1/messaging/rooms/history/messages");
    expect(first.status).toBe(200);
    expect(first.body.messages).toHaveLength(20);
    expect(first.body.messages[0]).toMatchObject({
      id: ids[24],
      content: "message 25",
      created_by: "alice",
      created_by_name: "Alice Liddell",
    });
    const page = await get("bob", "/api/v1/messaging/rooms/history/messages?size=5&offset=20");
    expect(page.body.messages.map((m: any) => m.content)).toEqual([
      "message 5",
      "message 4",
      "message 3",
      "message 2",
      "message 1",
    ]);
    const full = await get("bob", "/api/v1/messaging/rooms/history/messages?size=100");
    expect(full.body.messages).toHaveLength(25);
  });

  test("message_ids picks messages; group_by_day groups them under their UTC day", async () => {
    const picked = await get(
      "bob",
      `/api/v1/messaging/rooms/history/messages?message_ids=${ids[0]},${ids[1]},${ids[2]}`,
    );
    expect(picked.body.messages.map((m: any) => m.id)).toEqual([ids[2], ids[1], ids[0]]);
    const grouped = await get(
      "bob",
      `/api/v1/messaging/rooms/history/messages?message_ids=${ids[0]},${ids[1]},${ids[2]}&group_by_day=true`,
    );
    const today = new Date().toISOString().slice(0, 10);
    expect(grouped.body.days.map((d: any) => [d.day, d.messages.map((m: any) => m.id)])).toEqual([
      [today, [ids[2]]],
      ["2026-01-03", [ids[1]]],
      ["2026-01-02", [ids[0]]],
    ]);
    expect(grouped.body.days[2].messages[0].inserted_at).toBe("2026-01-02T10:00:00.000Z");
  });

  test("one message; edits by the author only, keeping updated_at", async () => {
    const one = await get("bob", `/api/v1/messaging/rooms/history/messages/${ids[2]}`);
    expect(one.body).toMatchObject({ id: ids[2], content: "message 3", reply_count: 0, parent_id: null });
    expect(
      (await send("bob", "PUT", `/api/v1/messaging/rooms/history/messages/${ids[2]}`, { content: "hijack" })).status,
    ).toBe(403);
    const edited = await send("alice", "PUT", `/api/v1/messaging/rooms/history/messages/${ids[2]}`, {
      content: "message three",
    });
    expect(edited.status).toBe(200);
    expect(edited.body.content).toBe("message three");
    expect(Date.parse(edited.body.updated_at)).toBeGreaterThan(Date.parse(one.body.updated_at));
    expect(edited.body.inserted_at).toBe(one.body.inserted_at);
  });

  test("replies: listed under their parent, deleted with it, and not in the room list", async () => {
    const parent = await post("alice", "history", { content: "question" });
    const r1 = await post("bob", "history", { content: "answer 1", parent_id: parent.id });
    const r2 = await post("carol", "history", { content: "answer 2", parent_id: parent.id });
    await expect(post("bob", "history", { content: "nested", parent_id: r1.id })).rejects.toMatchObject({
      code: "validation_failed",
    });
    const replies = await get("alice", `/api/v1/messaging/rooms/history/messages/${parent.id}/messages_replies`);
    expect(replies.body.messages.map((m: any) => m.id)).toEqual([r2.id, r1.id]);
    expect(replies.body.messages[0].parent_id).toBe(parent.id);
    const grouped = await get(
      "alice",
      `/api/v1/messaging/rooms/history/messages/${parent.id}/messages_replies?group_by_day=true`,
    );
    expect(grouped.body.days[0].messages).toHaveLength(2);
    expect((await get("alice", `/api/v1/messaging/rooms/history/messages/${parent.id}`)).body.reply_count).toBe(2);
    const top = await get("alice", "/api/v1/messaging/rooms/history/messages?size=3");
    expect(top.body.messages.map((m: any) => m.id)).not.toContain(r1.id);

    // Bob may delete his own reply but not Carol's.
    expect(
      (
        await send("bob", "DELETE", `/api/v1/messaging/rooms/history/messages/${parent.id}/messages_replies`, {
          reply_message_ids: [r2.id],
        })
      ).status,
    ).toBe(403);
    const own = await send("bob", "DELETE", `/api/v1/messaging/rooms/history/messages/${parent.id}/messages_replies`, {
      reply_message_ids: [r1.id],
    });
    expect(own.body).toEqual({ message: "1 reply deleted" });
    expect(
      (
        await send("bob", "DELETE", `/api/v1/messaging/rooms/history/messages/${parent.id}/messages_replies`, {
          reply_message_ids: [r1.id],
        })
      ).status,
    ).toBe(404);

    const gone = await send("alice", "DELETE", "/api/v1/messaging/rooms/history/messages", {
      message_ids: [parent.id],
    });
    expect(gone.body).toEqual({ message: "2 messages deleted" });
    expect((await get("alice", `/api/v1/messaging/rooms/history/messages/${r2.id}`)).status).toBe(404);
  });

  test("delete: author or room owner; is_empty empties the room (owner only)", async () => {
    await send("bob", "POST", "/api/v1/messaging/rooms/create", { channel_id: "bobs" });
    const a = await post("alice", "bobs", { content: "from alice" });
    const c = await post("carol", "bobs", { content: "from carol" });
    await post("carol", "bobs", { content: "another" });
    expect(
      (await send("carol", "DELETE", "/api/v1/messaging/rooms/bobs/messages", { message_ids: [a.id] })).status,
    ).toBe(403);
    expect(
      (await send("carol", "DELETE", "/api/v1/messaging/rooms/bobs/messages", { message_ids: [c.id] })).status,
    ).toBe(200);
    expect((await send("bob", "DELETE", "/api/v1/messaging/rooms/bobs/messages", { message_ids: [a.id] })).status).toBe(
      200,
    );
    expect((await send("carol", "DELETE", "/api/v1/messaging/rooms/bobs/messages", { is_empty: true })).status).toBe(
      403,
    );
    expect((await send("bob", "DELETE", "/api/v1/messaging/rooms/bobs/messages", {})).status).toBe(422);
    const emptied = await send("bob", "DELETE", "/api/v1/messaging/rooms/bobs/messages", { is_empty: true });
    expect(emptied.body.message).toContain("1 message deleted");
    expect((await get("bob", "/api/v1/messaging/rooms/bobs/messages")).body).toEqual({ messages: [] });
  });

  test("an inactive room is read-only", async () => {
    await send("alice", "POST", "/api/v1/messaging/rooms/create", { channel_id: "closed", status: "inactive" });
    await expect(post("alice", "closed", { content: "hi" })).rejects.toMatchObject({ code: "forbidden" });
    expect((await get("alice", "/api/v1/messaging/rooms/closed/messages")).body).toEqual({ messages: [] });
  });
});

describe("search", () => {
  beforeAll(async () => {
    await send("alice", "POST", "/api/v1/messaging/rooms/create", { channel_id: "search" });
    for (const content of [
      "Quarterly REPORT due",
      "the report is late",
      "100% done",
      "100 percent",
      "snake_case name",
      "snakeXcase",
      "back\\slash",
    ]) {
      await post("alice", "search", { content });
    }
  });

  const search = async (term: string) =>
    (
      await get("bob", `/api/v1/messaging/rooms/search/messages/search?search_term=${encodeURIComponent(term)}`)
    ).body.messages.map((m: any) => m.content);

  test("is case-insensitive and finds substrings, newest first", async () => {
    expect(await search("report")).toEqual(["the report is late", "Quarterly REPORT due"]);
  });

  test("% and _ and \\ are literal", async () => {
    expect(await search("100%")).toEqual(["100% done"]);
    expect(await search("%")).toEqual(["100% done"]);
    expect(await search("e_c")).toEqual(["snake_case name"]);
    expect(await search("k\\s")).toEqual(["back\\slash"]);
  });

  test("an empty term is refused; another room's messages are not found", async () => {
    expect((await get("bob", "/api/v1/messaging/rooms/search/messages/search?search_term=")).status).toBe(400);
    expect((await get("bob", "/api/v1/messaging/rooms/search/messages/search")).status).toBe(400);
    expect((await get("bob", "/api/v1/messaging/rooms/search/messages/search?search_term=%00")).status).toBe(400);
    await expect(post("bob", "search", { content: "nul\u0000byte" })).rejects.toMatchObject({
      code: "validation_failed",
    });
    expect(await search("message 1")).toEqual([]);
  });

  test("users: by name or id, case-insensitive, literal wildcards, within the account", async () => {
    const users = async (term: string, who = "bob") =>
      (await get(who, `/api/v1/messaging/users/search?search_term=${encodeURIComponent(term)}`)).body.users;
    expect(await users("ALICE")).toEqual([{ id: "alice", name: "Alice Liddell" }]);
    expect(await users("100%_")).toEqual([{ id: "carol", name: "Carol 100%_sure" }]);
    expect(await users("_")).toEqual([{ id: "carol", name: "Carol 100%_sure" }]);
    const other = await newAccount();
    tokens.stranger = await tokenFor(other.apiKey, { id: "zed", name: "Zed" }, "messaging");
    expect(await users("alice", "stranger")).toEqual([]);
  });

  test("the trigram indexes serve the searches", async () => {
    const plan = await db.transaction(async (tx) => {
      await tx.execute(sql`set local enable_seqscan = off`);
      return tx.execute(sql`explain select id from chat_messages where content ilike '%report%'`);
    });
    expect(JSON.stringify(plan)).toContain("chat_messages_content_trgm_idx");
    const users = await db.transaction(async (tx) => {
      await tx.execute(sql`set local enable_seqscan = off`);
      return tx.execute(sql`explain select id from chat_users where name ilike '%alic%'`);
    });
    expect(JSON.stringify(users)).toContain("chat_users_name_trgm_idx");
  });
});

describe("content types", () => {
  test("a content type naming markup or script is refused; the content of any other is text", async () => {
    await send("alice", "POST", "/api/v1/messaging/rooms/create", { channel_id: "typed" });
    for (const contentType of [
      "text/html",
      "html",
      "application/xhtml+xml",
      "image/svg+xml",
      "text/javascript",
      "js",
    ]) {
      await expect(
        post("alice", "typed", { content: "<img src=x onerror=alert(1)>", content_type: contentType }),
      ).rejects.toMatchObject({ code: "validation_failed", message: expect.stringContaining("content_type:") });
    }
    for (const contentType of ["text", "markdown", "text/markdown", "image", "transcript", "location"]) {
      const stored = await post("alice", "typed", { content: "<b>as typed</b>", content_type: contentType });
      expect([stored.content_type, stored.content]).toEqual([contentType, "<b>as typed</b>"]);
    }
  });
});

describe("polls over REST", () => {
  test("is_voted, votes and voting; one answer per user, changeable", async () => {
    await send("alice", "POST", "/api/v1/messaging/rooms/create", { channel_id: "vote" });
    const poll = await post("alice", "vote", { content: "Best day?", content_type: "poll", options: ["Mon", "Fri"] });
    const [mon, fri] = poll.options!;
    const base = `/api/v1/messaging/rooms/vote/messages/${poll.id}/poll`;
    expect((await get("bob", `${base}/is_voted`)).body).toEqual({ is_voted: false });
    expect((await send("bob", "POST", `${base}/${mon!.id}`)).body).toEqual({
      poll_answer: { answer: mon!.id, user_id: "bob" },
    });
    expect((await get("bob", `${base}/is_voted`)).body).toEqual({ is_voted: true });
    expect((await get("alice", `${base}/is_voted`)).body).toEqual({ is_voted: false });
    await send("bob", "POST", `${base}/${fri!.id}`);
    await send("alice", "POST", `${base}/${fri!.id}`);
    expect((await get("carol", `${base}/votes`)).body.votes).toEqual([
      { answer: fri!.id, user_id: "bob" },
      { answer: fri!.id, user_id: "alice" },
    ]);
    const shown = await get("carol", `/api/v1/messaging/rooms/vote/messages/${poll.id}`);
    expect(shown.body.options).toEqual([
      { id: mon!.id, text: "Mon", vote_count: 0 },
      { id: fri!.id, text: "Fri", vote_count: 2 },
    ]);

    const other = await post("alice", "vote", { content: "Other", content_type: "poll", options: ["x", "y"] });
    const foreign = await send("bob", "POST", `${base}/${other.options![0]!.id}`);
    expect(foreign.status).toBe(422);
    const plain = await post("alice", "vote", { content: "not a poll" });
    expect(
      (await send("bob", "POST", `/api/v1/messaging/rooms/vote/messages/${plain.id}/poll/${mon!.id}`)).status,
    ).toBe(422);
    expect((await get("bob", `/api/v1/messaging/rooms/vote/messages/${plain.id}/poll/votes`)).status).toBe(422);
    await expect(
      post("alice", "vote", { content: "q", content_type: "poll", options: ["same", "same"] }),
    ).rejects.toMatchObject({ code: "validation_failed" });
    await expect(post("alice", "vote", { content: "q", options: ["a", "b"] })).rejects.toMatchObject({
      code: "validation_failed",
    });
  });
});
