/**
 * The Redis broker hands a frame to Redis only where another process has sockets on the
 * topic, in broadcast order; processes that died are dropped from a topic's interest; and
 * `auto` picks the local broker for a single API process.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { RedisBroker } from "../../src/realtime/redis-broker";
import { createRedis, redis, redisKey } from "../../src/queue/connection";
import { eventually } from "../support/wait";

const listener = createRedis("test-listener");
afterAll(() => listener.disconnect());

describe("RedisBroker interest", () => {
  test("frames reach Redis only while another process has sockets on the topic, in order", async () => {
    const here = new RedisBroker();
    const elsewhere = new RedisBroker();
    const topic = "acc/interest:ordered";
    const interestOf = async (broker: RedisBroker, declared: boolean) =>
      expect(
        await eventually(
          async () => (await redis().sismember(redisKey("rt-interest", topic), broker.node)) === (declared ? 1 : 0),
        ),
      ).toBe(true);
    const published: string[] = [];
    listener.on("message", (_channel: string, text: string) => published.push(text));
    await listener.subscribe(redisKey("rt", topic));

    await here.subscribe(topic);
    await here.broadcast(topic, "alone"); // only this process listens: nothing leaves it
    await elsewhere.subscribe(topic);
    // A join waits for its SUBSCRIBE and SADD only a prompt while (PROMPT_REDIS_MS); on a busy machine the
    // interest can land later, and frames sent before it rightly stay here.
    await interestOf(elsewhere, true);
    for (let i = 0; i < 50; i++) here.broadcast(topic, `frame ${i}`);
    await here.broadcast(topic, "last shared");
    // A broadcast returns once handed on; a leave on another connection could overtake frames still on the wire.
    expect(await eventually(() => published.includes(`${here.node} last shared`))).toBe(true);
    await elsewhere.unsubscribe(topic);
    await interestOf(elsewhere, false);
    await here.broadcast(topic, "alone again");
    await elsewhere.subscribe(topic);
    await interestOf(elsewhere, true);
    await here.broadcast(topic, "shared again");

    expect(await eventually(() => published.includes(`${here.node} shared again`))).toBe(true);
    expect(published).toEqual([
      ...Array.from({ length: 50 }, (_, i) => `${here.node} frame ${i}`),
      `${here.node} last shared`,
      `${here.node} shared again`,
    ]);
    await here.close();
    await elsewhere.close();
    expect(await redis().smembers(redisKey("rt-interest", topic))).toEqual([]);
  });

  test("a process that died with sockets on a topic is dropped from its interest when another joins", async () => {
    const topic = "acc/interest:dead";
    await redis().sadd(redisKey("rt-interest", topic), "a-process-that-died");
    const here = new RedisBroker();
    await here.subscribe(topic);
    expect(
      await eventually(async () => (await redis().smembers(redisKey("rt-interest", topic))).join() === here.node),
    ).toBe(true);
    await here.close();
  });
});

describe("REALTIME_BROKER=auto", () => {
  const kindWith = async (env: Record<string, string>) => {
    const child = Bun.spawn(
      [
        process.execPath,
        "-e",
        'const { brokerKind } = await import("./src/process/root.ts"); console.log(brokerKind(false));',
      ],
      {
        env: { ...process.env, REALTIME_BROKER: "auto", ...env },
        stdout: "pipe",
        stderr: "inherit",
      },
    );
    const output = await new Response(child.stdout).text();
    await child.exited;
    return output.trim();
  };

  test("is local for one API process and Redis for several", async () => {
    expect(await kindWith({ API_PROCESSES: "1" })).toBe("local");
    expect(await kindWith({ API_PROCESSES: "2" })).toBe("redis");
  });
});
