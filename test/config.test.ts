/**
 * The settings: parsed by a pure function that names every wrong variable,
 * read through `config`, changed for a test only by overrideConfig.
 */
import { describe, expect, test } from "bun:test";
import { ConfigError, config, loadConfig, overrideConfig } from "../src/core/config";

describe("loadConfig", () => {
  test("names every wrong variable at once, each in its own message", () => {
    let thrown: unknown;
    try {
      loadConfig({ PORT: "http", LOG_LEVEL: "loud", SIP_RTP_PORT_MIN: "20000", STREAMING_RECORDER_DRIVER: "command" });
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ConfigError);
    const { problems, message } = thrown as ConfigError;
    expect(problems).toEqual([
      'PORT must be a whole number from 0 to 65535, got "http"',
      'LOG_LEVEL must be one of trace, debug, info, warn, error, fatal, silent, got "loud"',
      "STREAMING_RECORDER_COMMAND must be set when STREAMING_RECORDER_DRIVER is command",
      "SIP_RTP_PORT_MIN must not exceed SIP_RTP_PORT_MAX (20000 > 0)",
    ]);
    expect(message).toBe(problems.join("; "));
  });

  test("reads only the environment it is given, and hands back settings no one can edit", () => {
    const settings = loadConfig({ PORT: "4100", WEBHOOK_RETRY_SCHEDULE: "1,2" });
    expect(settings.http.port).toBe(4100);
    expect(loadConfig({}).http.port).toBe(3000);
    expect(() => {
      settings.http.port = 1;
    }).toThrow(TypeError);
    expect(() => settings.webhooks.retrySchedule.push(3)).toThrow(TypeError);
  });
});

describe("Redis through Sentinel", () => {
  test("REDIS_SENTINELS is read as host:port pairs (IPv6 in brackets); anything else is named", () => {
    const settings = loadConfig({
      REDIS_SENTINELS: "10.0.0.1:26379, sentinel-b:26380,[::1]:26381",
      REDIS_SENTINEL_NAME: "parley",
    });
    expect(settings.redis.sentinels).toEqual([
      { host: "10.0.0.1", port: 26379 },
      { host: "sentinel-b", port: 26380 },
      { host: "::1", port: 26381 },
    ]);
    expect(settings.redis.sentinelName).toBe("parley");
    expect(settings.redis.explicit).toBe(true);
    expect(loadConfig({}).redis).toMatchObject({ sentinels: [], sentinelName: "mymaster", explicit: false });
    expect(() => loadConfig({ REDIS_SENTINELS: "10.0.0.1:26379,sentinel-b" })).toThrow(
      'REDIS_SENTINELS must be a comma-separated list of host:port, got "sentinel-b"',
    );
    expect(() => loadConfig({ REDIS_SENTINELS: "a:0" })).toThrow('got "a:0"');
  });
});

describe("Redis Cluster", () => {
  test("REDIS_CLUSTER_NODES is read as host:port seeds; anything else, or Sentinel beside it, is named", () => {
    const settings = loadConfig({ REDIS_CLUSTER_NODES: "10.0.0.1:6379, redis-b:7000,[::1]:7001" });
    expect(settings.redis.clusterNodes).toEqual([
      { host: "10.0.0.1", port: 6379 },
      { host: "redis-b", port: 7000 },
      { host: "::1", port: 7001 },
    ]);
    expect(settings.redis.explicit).toBe(true);
    expect(loadConfig({}).redis.clusterNodes).toEqual([]);
    expect(() => loadConfig({ REDIS_CLUSTER_NODES: "redis://10.0.0.1:6379" })).toThrow(
      'REDIS_CLUSTER_NODES must be a comma-separated list of host:port, got "redis://10.0.0.1:6379"',
    );
    expect(() => loadConfig({ REDIS_CLUSTER_NODES: "a:7000", REDIS_SENTINELS: "b:26379" })).toThrow(
      "REDIS_CLUSTER_NODES and REDIS_SENTINELS name two ways to reach Redis: give one",
    );
  });
});

describe("PostgreSQL with several hosts", () => {
  test("DATABASE_URL may name several hosts, each checked; a wrong one is named", () => {
    const url = "postgres://parley:secret@db1:5432,db2:5433,[::1]:5434/parley?target_session_attrs=read-write";
    expect(loadConfig({ DATABASE_URL: url }).database.url).toBe(url);
    expect(() => loadConfig({ DATABASE_URL: "postgres://db1:5432,db2:port/parley" })).toThrow(
      'DATABASE_URL must be a URL, each of its hosts too, got "postgres://db1:5432,db2:port/parley"',
    );
    expect(() => loadConfig({ DATABASE_URL: "postgres://db1,,db2/parley" })).toThrow("each of its hosts too");
    expect(() => loadConfig({ DATABASE_URL: "mysql://db1,db2/parley" })).toThrow("each of its hosts too");
  });
});

describe("overrideConfig", () => {
  test("changes only the settings it names, everywhere they are read, until restored", () => {
    const before = {
      checkOwner: config.scheduler.checkOwner,
      minutes: config.scheduler.defaultConferenceMinutes,
      schedule: config.webhooks.retrySchedule,
    };
    const restore = overrideConfig({
      scheduler: { checkOwner: !before.checkOwner },
      webhooks: { retrySchedule: [600] },
    });
    try {
      expect(config.scheduler.checkOwner).toBe(!before.checkOwner);
      expect(config.scheduler.defaultConferenceMinutes).toBe(before.minutes);
      expect(config.webhooks.retrySchedule).toEqual([600]);
      expect(() => {
        config.scheduler.checkOwner = before.checkOwner;
      }).toThrow(TypeError);
    } finally {
      restore();
    }
    expect(config.scheduler.checkOwner).toBe(before.checkOwner);
    expect(config.webhooks.retrySchedule).toBe(before.schedule);
  });
});
