import { afterAll, describe, expect, test } from "bun:test";
import { LocalPubSub, type PubSub } from "../../src/core/pubsub";
import { closeClient, createRedis, redisKey } from "../../src/queue/connection";
import { pubsub, redisPubSub } from "../../src/queue/redis-pubsub";
import { eventually } from "../support/wait";

describe.each([
  ["local", new LocalPubSub() as PubSub],
  ["redis", redisPubSub],
])("%s publish/subscribe", (_kind, bus) => {
  test("a message reaches every subscription of its channel, named as published, and no other", async () => {
    const heard: string[] = [];
    const other: string[] = [];
    const first = bus.subscribe("test-first", ["t:a", "t:b"], (channel, message) =>
      heard.push(`${channel} ${message}`),
    );
    const second = bus.subscribe("test-second", ["t:c"], (channel, message) => other.push(`${channel} ${message}`));
    await Promise.all([first.ready, second.ready]);
    await bus.publish("t:a", "one");
    await bus.publish("t:b", "two", { withinMs: 1_000 });
    await eventually(() => heard.length === 2);
    expect(heard).toEqual(["t:a one", "t:b two"]);
    expect(other).toEqual([]);
    await Promise.all([first.close(), second.close()]);
  });

  test("a closed subscription hears nothing more", async () => {
    const heard: string[] = [];
    const open = bus.subscribe("test-open", ["t:d"], (_channel, message) => heard.push(`open ${message}`));
    const closed = bus.subscribe("test-closed", ["t:d"], (_channel, message) => heard.push(`closed ${message}`));
    await Promise.all([open.ready, closed.ready]);
    await closed.close();
    await bus.publish("t:d", "after");
    await eventually(() => heard.length === 1);
    await Bun.sleep(50);
    expect(heard).toEqual(["open after"]);
    await open.close();
  });
});

describe("redis publish/subscribe", () => {
  const raw = createRedis("test-raw");
  afterAll(() => closeClient(raw));

  test("channels are prefixed like keys, as the channels written by hand before were", async () => {
    const heard: string[] = [];
    raw.on("message", (channel: string, message: string) => heard.push(`${channel} ${message}`));
    await raw.subscribe(redisKey("streams", "state"));
    await redisPubSub.publish("streams:state", "stream-1");
    await eventually(() => heard.length === 1);
    expect(heard).toEqual([`${redisKey("streams", "state")} stream-1`]);
  });
});

test("a process on PostgreSQL, built by its root as this test's is, publishes over Redis", () => {
  expect(pubsub()).toBe(redisPubSub);
});
