/** The one place Redis connections are made: commands, subscriptions and BullMQ all come from here. */
import { Redis } from "ioredis";
import { config } from "../config";

export function createRedis(purpose: string): Redis {
  return new Redis(config.redis.url, {
    connectionName: `parley:${purpose}`,
    // BullMQ requires null here so blocking commands are never cut short.
    maxRetriesPerRequest: null,
    lazyConnect: false,
  });
}

let shared: Redis | undefined;

/** The process-wide command connection (not for SUBSCRIBE or blocking reads). */
export function redis(): Redis {
  shared ??= createRedis("commands");
  return shared;
}

/** Prefixes a key so several deployments can share one Redis. */
export function redisKey(...parts: (string | number)[]): string {
  return [config.redis.keyPrefix, ...parts].join(":");
}

export async function pingRedis(): Promise<void> {
  await redis().ping();
}

export async function closeRedis(): Promise<void> {
  await shared?.quit().catch(() => shared?.disconnect());
  shared = undefined;
}
