/** Both brokers honour one contract: delivery to subscribed sockets (minus `except`) and presence. */
import { afterAll, describe, expect, test } from "bun:test";
import type { ServerWebSocket } from "bun";
import type { Broker } from "../../src/realtime/broker";
import { attachServer, LocalBroker } from "../../src/realtime/local-broker";
import { RedisBroker } from "../../src/realtime/redis-broker";
import { eventually } from "../support/wait";

const sockets: ServerWebSocket<unknown>[] = [];
const server = Bun.serve<string>({
  hostname: "127.0.0.1",
  port: 0,
  fetch(request, srv) {
    return srv.upgrade(request, { data: new URL(request.url).searchParams.get("topic") ?? "" })
      ? undefined
      : new Response("no", { status: 400 });
  },
  websocket: {
    open(ws) {
      ws.subscribe(ws.data);
      sockets.push(ws as ServerWebSocket<unknown>);
    },
    message() {},
  },
});
attachServer(server as never);

afterAll(() => server.stop(true));

async function client(topic: string) {
  const received: string[] = [];
  const before = sockets.length;
  const ws = new WebSocket(`ws://127.0.0.1:${server.port}/?topic=${encodeURIComponent(topic)}`);
  ws.onmessage = (event) => received.push(String(event.data));
  await new Promise((resolve) => {
    ws.onopen = resolve;
  });
  // The server's open handler may run a turn after the client's.
  if (!(await eventually(() => sockets.length > before))) throw new Error("the server never saw the socket open");
  return { ws, received, server: sockets.at(-1)! };
}

for (const [name, make] of [
  ["LocalBroker", () => new LocalBroker()],
  ["RedisBroker", () => new RedisBroker()],
] as const) {
  describe(name, () => {
    const broker: Broker = make();
    afterAll(() => broker.close());

    test("delivers a frame to every socket on the topic, or to all but one", async () => {
      const topic = `acc/${name}:delivery`;
      await broker.subscribe(topic);
      const a = await client(topic);
      const b = await client(topic);
      const other = await client(`acc/${name}:other`);
      await broker.broadcast(topic, "everyone");
      expect(await eventually(() => a.received.length === 1 && b.received.length === 1)).toBe(true);
      await broker.broadcast(topic, "not a", a.server);
      expect(await eventually(() => b.received.length === 2)).toBe(true);
      await Bun.sleep(50);
      expect(a.received).toEqual(["everyone"]);
      expect(b.received).toEqual(["everyone", "not a"]);
      expect(other.received).toEqual([]);
      await broker.unsubscribe(topic);
      for (const { ws } of [a, b, other]) ws.close();
    });

    test("tracks, lists and untracks presence per topic", async () => {
      const topic = `acc/${name}:presence`;
      await broker.track(topic, { key: "alice", meta: { phx_ref: "r1", name: "Alice" } });
      await broker.track(topic, { key: "alice", meta: { phx_ref: "r2", name: "Alice" } });
      await broker.track(`${topic}-elsewhere`, { key: "bob", meta: { phx_ref: "r3" } });
      const listed = (await broker.presence(topic)).sort((x, y) => x.meta.phx_ref.localeCompare(y.meta.phx_ref));
      expect(listed).toEqual([
        { key: "alice", meta: { phx_ref: "r1", name: "Alice" } },
        { key: "alice", meta: { phx_ref: "r2", name: "Alice" } },
      ]);
      await broker.untrack(topic, "r1");
      expect((await broker.presence(topic)).map((entry) => entry.meta.phx_ref)).toEqual(["r2"]);
      await broker.untrack(topic, "r2");
      await broker.untrack(`${topic}-elsewhere`, "r3");
      expect(await broker.presence(topic)).toEqual([]);
    });
  });
}

describe("RedisBroker across processes", () => {
  test("a frame from another process reaches this one's sockets once; a dead process's presence is gone", async () => {
    const here = new RedisBroker();
    const elsewhere = new RedisBroker();
    const topic = "acc/cross:topic";
    await here.subscribe(topic);
    const socket = await client(topic);
    // Stands in for another process: publish to Redis only, as its own local delivery has no sockets here.
    const { redis, redisKey } = await import("../../src/queue/connection");
    await redis().publish(redisKey("rt", topic), `${elsewhere.node} from-elsewhere`);
    await redis().publish(redisKey("rt", topic), `${here.node} own-echo`);
    expect(await eventually(() => socket.received.length >= 1)).toBe(true);
    await Bun.sleep(100);
    expect(socket.received).toEqual(["from-elsewhere"]);

    await elsewhere.track(topic, { key: "ghost", meta: { phx_ref: "g1" } });
    await here.track(topic, { key: "alice", meta: { phx_ref: "a1" } });
    expect((await here.presence(topic)).map((entry) => entry.key).sort()).toEqual(["alice", "ghost"]);
    await elsewhere.close(); // its liveness key goes, as when a process dies and the key expires
    expect((await here.presence(topic)).map((entry) => entry.key)).toEqual(["alice"]);
    await here.untrack(topic, "a1");
    await here.close();
    socket.ws.close();
  });

  test("frames broadcast in one turn reach another process each once, in order per topic", async () => {
    const here = new RedisBroker();
    const elsewhere = new RedisBroker();
    const topics = ["acc/batch:one", "acc/batch:two"];
    for (const topic of topics) await here.subscribe(topic);
    const [one, two] = [await client(topics[0]!), await client(topics[1]!)];
    // Ready before the burst, so the frames leave together at the end of the turn.
    await elsewhere.broadcast("acc/batch:warm-up", "warm-up");
    const frames = Array.from({ length: 40 }, (_, i) => `frame ${i}`);
    // Interleaved over both topics, none awaited: the turn's frames go out in one call per topic.
    const broadcasts = frames.map((frame, i) => elsewhere.broadcast(topics[i % 2]!, frame));
    await elsewhere.handedOn();
    await Promise.all(broadcasts);
    const sent = (topic: number) => frames.filter((_, i) => i % 2 === topic);
    // Both brokers are in this process: each frame comes once delivered here by its sender, then once from Redis.
    const expected = (topic: number) => [...sent(topic), ...sent(topic)];
    expect(await eventually(() => one!.received.length === 40 && two!.received.length === 40)).toBe(true);
    await Bun.sleep(100);
    expect(one!.received).toEqual(expected(0));
    expect(two!.received).toEqual(expected(1));
    await here.close();
    await elsewhere.close();
    one!.ws.close();
    two!.ws.close();
  });
});
