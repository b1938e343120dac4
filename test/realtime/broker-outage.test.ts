/**
 * The Redis broker across a Redis restart that loses everything: broadcasts while Redis is
 * away return at once and are logged once, not queued; when Redis returns, the process's
 * interest is declared again, so frames reach the other processes without waiting for a
 * heartbeat. A caller that asks (a chat message's acknowledgement) waits until Redis has taken
 * the frames broadcast so far. The brokers run in a child process pointed at a private Redis.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Subprocess } from "bun";
import Redis from "ioredis";
import { type PrivateRedis, privateRedis } from "../support/redis-server";
import { eventually, until } from "../support/wait";

const PREFIX = "outage-test";
const TOPIC = "acc/outage:frames";

/**
 * Two brokers standing for two processes with sockets on TOPIC;
 * commands arrive on stdin, answers are lines starting with "@".
 */
const CHILD = `
const { RedisBroker } = await import("./src/realtime/redis-broker.ts");
const here = new RedisBroker();
const elsewhere = new RedisBroker();
await here.subscribe(${JSON.stringify(TOPIC)});
await elsewhere.subscribe(${JSON.stringify(TOPIC)});
console.log("@ready " + here.node + " " + elsewhere.node);
for await (const chunk of console) {
  const [command, arg] = chunk.trim().split(" ");
  if (command === "burst") {
    const started = performance.now();
    for (let i = 0; i < Number(arg); i++) await here.broadcast(${JSON.stringify(TOPIC)}, "during " + i);
    console.log("@burst " + Math.round(performance.now() - started));
  } else if (command === "handed") {
    here.broadcast(${JSON.stringify(TOPIC)}, "handed " + arg);
    await here.handedOn();
    console.log("@handed " + arg);
  } else if (command === "send") {
    await here.broadcast(${JSON.stringify(TOPIC)}, "after " + arg);
    console.log("@sent " + arg);
  }
}
`;

let redis: PrivateRedis;
let child: Subprocess<"pipe", "pipe", "inherit">;
const lines: string[] = [];

async function readLines(stream: ReadableStream<Uint8Array>) {
  const decoder = new TextDecoder();
  let rest = "";
  for await (const chunk of stream) {
    rest += decoder.decode(chunk);
    const parts = rest.split("\n");
    rest = parts.pop() ?? "";
    lines.push(...parts);
  }
}

const answer = (prefix: string) => until(() => lines.find((line) => line.startsWith(prefix)), Boolean, 10_000, 20);
const tell = (command: string) => {
  child.stdin.write(`${command}\n`);
  child.stdin.flush();
};

/** A client subscribed to TOPIC's channel on the private Redis, as another process's broker is, and what it got. */
async function listen(): Promise<{ received: string[]; disconnect(): void }> {
  const listener = new Redis(redis.url, { lazyConnect: false, maxRetriesPerRequest: 1 });
  const received: string[] = [];
  listener.on("message", (_channel: string, text: string) => received.push(text));
  await listener.subscribe(`${PREFIX}:rt:${TOPIC}`);
  return { received, disconnect: () => listener.disconnect() };
}

beforeAll(async () => {
  redis = await privateRedis();
  child = Bun.spawn([process.execPath, "-e", CHILD], {
    env: { ...process.env, REDIS_URL: redis.url, REDIS_PREFIX: PREFIX, LOG_LEVEL: "info" },
    stdin: "pipe",
    stdout: "pipe",
    stderr: "inherit",
  });
  readLines(child.stdout);
}, 20_000);

afterAll(async () => {
  child?.kill("SIGKILL");
  await child?.exited;
  await redis?.kill();
});

test("Redis away: a broadcast does not wait, fan-out failure logged once; interest declared again after", async () => {
  const [, here, elsewhere] = (await answer("@ready"))?.split(" ") ?? [];
  expect(here).toBeDefined();

  await redis.kill();
  // Let every connection of the child notice the loss.
  await Bun.sleep(500);
  tell("burst 500");
  const burstMs = Number((await answer("@burst"))?.split(" ")[1]);
  expect(burstMs).toBeLessThan(500);

  await redis.start();
  const fresh = new Redis(redis.url, { lazyConnect: false, maxRetriesPerRequest: 1 });
  const listener = await listen();
  try {
    const { received } = listener;
    // The restarted Redis is empty: the interest set comes back from the child, well before its 10 s heartbeat.
    const members = await until(
      () => fresh.smembers(`${PREFIX}:rt-interest:${TOPIC}`),
      (nodes) => nodes.length === 2,
      5_000,
      50,
    );
    expect(members.sort()).toEqual([here, elsewhere].sort());
    let n = 0;
    expect(
      await eventually(async () => {
        tell(`send ${++n}`);
        await answer(`@sent ${n}`);
        await Bun.sleep(50);
        return received.some((text) => text.startsWith(`${here} after `));
      }),
    ).toBe(true);
    // Nothing broadcast during the outage was kept back and replayed once Redis returned.
    expect(received.filter((text) => text.includes(" during "))).toEqual([]);
  } finally {
    listener.disconnect();
    fresh.disconnect();
  }
  const failures = lines.filter((line) => line.includes("fan-out to other processes failed"));
  expect(failures.length).toBe(1);
  expect(await eventually(() => lines.some((line) => line.includes("fan-out to other processes works again")))).toBe(
    true,
  );
}, 30_000);

test("handedOn waits until Redis has taken what was broadcast, as a chat acknowledgement does", async () => {
  await answer("@ready");
  const pauser = new Redis(redis.url, { lazyConnect: false, maxRetriesPerRequest: 1 });
  const listener = await listen();
  try {
    const { received } = listener;
    // Redis holds every command for 700 ms: the broadcast's publish among them.
    await pauser.call("client", "pause", "700", "all");
    tell("handed 1");
    await Bun.sleep(300);
    expect(lines.some((line) => line.startsWith("@handed 1"))).toBe(false);
    expect(await answer("@handed 1")).toBe("@handed 1");
    expect(await until(() => received.some((text) => text.endsWith(" handed 1")), Boolean, 2_000, 20)).toBe(true);
  } finally {
    listener.disconnect();
    pauser.disconnect();
  }
}, 30_000);
