/**
 * Two separate API processes sharing PostgreSQL and Redis: sockets on one receive what is
 * sent on the other, presence spans both, and REST changes from a third process reach both.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Subprocess } from "bun";
import { startApiProcess } from "../support/api-process";
import { call } from "../helpers";
import { aliceAndBob } from "../support/chat-users";
import { connect, disconnect, join, push, recorder } from "../support/phoenix";

const IDLE_SECONDS = 2;
/**
 * Bob's sockets are on the second process, which closes sockets idle for IDLE_SECONDS: a loaded
 * machine can take as long between his frames.
 */
const HEARTBEAT = { heartbeatIntervalMs: 500 };
const processes: Subprocess[] = [];
const bases: string[] = [];
let aliceToken: string;
let bobToken: string;

async function startApi(extraEnv: Record<string, string> = {}): Promise<string> {
  const api = await startApiProcess(extraEnv);
  processes.push(api.child);
  return api.ws;
}

beforeAll(async () => {
  ({ aliceToken, bobToken } = await aliceAndBob(["cluster"]));
  bases.push(...(await Promise.all([startApi(), startApi({ REALTIME_IDLE_TIMEOUT_SECONDS: String(IDLE_SECONDS) })])));
}, 30_000);

afterAll(async () => {
  for (const child of processes) child.kill("SIGTERM");
  await Promise.all(processes.map((child) => child.exited));
});

describe("two API processes", () => {
  test("messages, votes, presence and REST edits cross between processes", async () => {
    const socketA = connect(bases[0]!, aliceToken);
    const socketB = connect(bases[1]!, bobToken, HEARTBEAT);
    const channelA = socketA.channel("chat:cluster");
    const channelB = socketB.channel("chat:cluster");
    const eventsA = recorder(channelA, ["new_message", "presence_diff", "user_joined", "message_updated", "new_vote"]);
    const eventsB = recorder(channelB, ["new_message", "presence_state", "message_updated", "new_vote"]);
    await join(channelA);
    await join(channelB);

    // Bob, on the second process, sees Alice, who joined on the first.
    expect(Object.keys(await eventsB.next("presence_state")).sort()).toEqual(["alice", "bob"]);
    expect(await eventsA.next("user_joined", (p) => p.user.id === "bob")).toEqual({ user: { id: "bob", name: "Bob" } });
    await eventsA.next("presence_diff", (d) => Object.keys(d.joins).includes("bob"));

    const sent = await push(channelA, "new_message", { content: "across processes" });
    expect(sent.status).toBe("ok");
    const received = await eventsB.next("new_message", (m) => m.content === "across processes");
    expect(received.id).toBe(sent.response.message.id);

    const poll = (await push(channelB, "new_message", { content: "Which?", content_type: "poll", options: ["a", "b"] }))
      .response.message;
    await eventsA.next("new_message", (m) => m.id === poll.id);
    await push(channelA, "new_vote", { message_id: poll.id, answer: poll.options[1].id });
    expect(await eventsB.next("new_vote", (v) => v.message_id === poll.id)).toMatchObject({
      user_id: "alice",
      answer: poll.options[1].id,
    });

    // A REST edit served by this test process reaches sockets on both others.
    const edited = await call("PUT", `/api/v1/messaging/rooms/cluster/messages/${received.id}`, {
      body: { content: "edited" },
      headers: { authorization: `Bearer ${aliceToken}` },
    });
    expect(edited.status).toBe(200);
    expect((await eventsA.next("message_updated")).content).toBe("edited");
    expect((await eventsB.next("message_updated")).content).toBe("edited");

    await disconnect(socketB);
    const left = await eventsA.next("presence_diff", (d) => Object.keys(d.leaves).includes("bob"));
    expect(left.leaves.bob.metas).toHaveLength(1);
    await disconnect(socketA);
  });

  test("rtc events are relayed across processes", async () => {
    const socketA = connect(bases[0]!, aliceToken);
    const socketB = connect(bases[1]!, bobToken, HEARTBEAT);
    const channelA = socketA.channel("rtc:cluster-call");
    const channelB = socketB.channel("rtc:cluster-call");
    const eventsB = recorder(channelB, ["ice"]);
    await join(channelA);
    await join(channelB);
    await push(channelA, "ice", { candidate: "c1" });
    expect(await eventsB.next("ice")).toEqual({ candidate: "c1", from: "alice" });
    await disconnect(socketA);
    await disconnect(socketB);
  });

  test("a socket that sends nothing is closed after the idle timeout; heartbeats keep one open", async () => {
    const url = `${bases[1]}/api/v1/messaging/websocket?token=${bobToken}&vsn=2.0.0`;
    const open = () =>
      new Promise<WebSocket>((resolve, reject) => {
        const ws = new WebSocket(url);
        ws.onopen = () => resolve(ws);
        ws.onerror = () => reject(new Error("no connection"));
      });
    const silent = await open();
    const chatty = await open();
    let chattyClosed = false;
    chatty.onclose = () => {
      chattyClosed = true;
    };
    const beat = setInterval(() => chatty.send(JSON.stringify([null, "1", "phoenix", "heartbeat", {}])), 500);
    const code = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("idle socket not closed")), (IDLE_SECONDS + 5) * 1000);
      silent.onclose = (event) => {
        clearTimeout(timer);
        resolve(event.code);
      };
    });
    clearInterval(beat);
    expect(code).toBe(1001);
    expect(chattyClosed).toBe(false);
    chatty.close();
  }, 15_000);
});
