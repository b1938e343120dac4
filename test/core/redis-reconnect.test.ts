/**
 * A Parley Redis connection through an outage: it logs the loss once, however many times it
 * tries again meanwhile, logs its return once with how long it was away, and works again.
 */
import { afterAll, expect, spyOn, test } from "bun:test";
import { overrideConfig } from "../../src/core/config";
import { log } from "../../src/core/log";
import { closeClient, createRedis } from "../../src/queue/connection";
import { privateRedis } from "../support/redis-server";
import { until } from "../support/wait";

const redis = await privateRedis();
afterAll(() => redis.kill());

test("an outage is one line when it starts and one when it ends; the connection works again", async () => {
  const restoreConfig = overrideConfig({ redis: { url: redis.url } });
  const purpose = `reconnect-${crypto.randomUUID()}`;
  const warn = spyOn(log, "warn");
  const info = spyOn(log, "info");
  const client = createRedis(purpose);
  const lines = (spy: typeof warn, message: string) =>
    spy.mock.calls.filter(([fields, text]) => (fields as { redis?: string }).redis === purpose && text === message);
  try {
    expect(await client.ping()).toBe("PONG");
    await redis.kill();
    // Long enough for many attempts: 50 ms, 100 ms, … apart, at most 500 ms.
    await until(
      () => client.status,
      (status) => status === "reconnecting",
    );
    await Bun.sleep(2_000);
    await redis.start();
    expect(
      await until(
        () => client.status,
        (status) => status === "ready",
        5_000,
      ),
    ).toBe("ready");
    expect(await client.ping()).toBe("PONG");

    // The process's other connections (the shared test Redis) are up: this one is the first to say it.
    const lost = warn.mock.calls.filter(([fields]) => (fields as { redis?: string }).redis === purpose);
    expect(lost).toHaveLength(1);
    expect(lost[0]![0]).toMatchObject({ setting: "REDIS_URL", address: `${redis.url}` });
    expect(lost[0]![1]).toContain(`Redis at REDIS_URL ${redis.url} cannot be reached (`);
    expect(lost[0]![1]).toContain("Meanwhile");
    const back = lines(info, "Redis connection back");
    expect(back).toHaveLength(1);
    expect((back[0]![0] as { awayMs: number }).awayMs).toBeGreaterThanOrEqual(2_000);
  } finally {
    warn.mockRestore();
    info.mockRestore();
    await closeClient(client);
    restoreConfig();
  }
}, 20_000);
