/**
 * The LL-HLS origin when Redis is slow to answer its first read of a stream: the viewer gets a
 * 503 in the error shape, and a doorbell of that stream ringing while the read was pending is
 * no unhandled rejection in the API process. The origin reaches Redis through a proxy here
 * that holds back any reply carrying the stream's marker longer than the origin waits.
 */
import { afterAll, expect, test } from "bun:test";
import type { Socket } from "bun";
import { createApp } from "../../src/process/app";
import { overrideConfig } from "../../src/core/config";
import { llhlsKeys } from "../../src/modules/streaming/llhls/publisher";
import { stopLlhlsOrigin } from "../../src/modules/streaming/llhls/origin";
import { stopViewerSweeps } from "../../src/modules/streaming/llhls/viewers";
import { closeClient, createRedis, PROMPT_REDIS_MS, redisKey } from "../../src/queue/connection";
import { until } from "../support/wait";

const MARKER = "held-back-by-the-proxy";
const target = new URL(process.env.REDIS_URL!);

/** Forwards to Redis both ways; Redis's replies holding MARKER reach the client 1.5 read bounds late. */
const proxy = Bun.listen<{ upstream?: Socket<undefined>; early: Uint8Array[] }>({
  hostname: "127.0.0.1",
  port: 0,
  socket: {
    async open(client) {
      client.data = { early: [] };
      client.data.upstream = await Bun.connect({
        hostname: target.hostname,
        port: Number(target.port || 6379),
        socket: {
          data(_, chunk) {
            const late = Buffer.from(chunk).includes(MARKER);
            setTimeout(() => client.write(chunk), late ? PROMPT_REDIS_MS * 1.5 : 0);
          },
          close: () => void client.end(),
          error: () => void client.end(),
        },
      });
      for (const chunk of client.data.early) client.data.upstream.write(chunk);
    },
    data(client, chunk) {
      if (client.data.upstream) client.data.upstream.write(chunk);
      else client.data.early.push(new Uint8Array(chunk));
    },
    close: (client) => void client.data.upstream?.end(),
    error: (client) => void client.data.upstream?.end(),
  },
});

const redis = createRedis("llhls-slow-redis-test");
const restore = overrideConfig({ redis: { url: `redis://127.0.0.1:${proxy.port}` } });
const api = createApp().listen({ hostname: "127.0.0.1", port: 0 });
const strays: unknown[] = [];
const onStray = (reason: unknown) => strays.push(reason);
process.on("unhandledRejection", onStray);

afterAll(async () => {
  process.off("unhandledRejection", onStray);
  await api.stop(true);
  stopViewerSweeps();
  await Promise.all([stopLlhlsOrigin(), closeClient(redis)]);
  restore();
  proxy.stop(true);
});

test("a first read Redis answers too late is a 503, and a doorbell rung meanwhile is no stray failure", async () => {
  const stream = "origin-slow-first-read";
  await redis.set(
    llhlsKeys.renditions(stream),
    JSON.stringify([{ name: "v0", bandwidth: 128_000, note: MARKER }]),
    "EX",
    60,
  );
  const asked = fetch(`http://127.0.0.1:${api.server!.port}/llhls/v1/live/${stream}/v0/index.m3u8`);
  // The origin listens for the stream's doorbell before its first read: rung once it does, while the read waits.
  const channel = redisKey(llhlsKeys.doorbell(stream));
  await until(
    async () => ((await redis.pubsub("NUMSUB", channel)) as [string, number])[1],
    (listeners) => listeners > 0,
    5_000,
  );
  await redis.publish(channel, "v0 w");
  const response = await asked;
  expect(response.status).toBe(503);
  expect((await response.json()).error.code).toBe("dependency_down");
  // The held-back reply arrives after the origin gave up on it; any stray failure would have surfaced by then.
  await Bun.sleep(PROMPT_REDIS_MS);
  expect(strays).toEqual([]);
});
