/**
 * Rates (requests, tokens, socket frames), counted in Redis with rate-limiter-flexible so
 * every process shares one counter per account, API key, user or address.
 *
 * When Redis cannot answer, each process counts in its own memory (the library's insurance
 * limiter): a flood is still slowed, while the totals are per process until Redis is back.
 */
import { createHash } from "node:crypto";
import type { Redis } from "ioredis";
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes } from "rate-limiter-flexible";
import { config } from "../../config";
import { log } from "../../core/log";
import type { PolicyState } from "../../http/ratelimit";
import { createRedis, redisKey } from "../../queue/connection";
import { definitionOf, type LimitName, type RouteFamily } from "./catalog";
import { type AccountLimits, LimitExceeded, limitsOf } from "./service";

let counters: Redis | undefined;
let redisDown = false;

/**
 * The connection the counters use: it never queues a command while Redis is away and
 * gives up on a slow answer, so a Redis outage costs a request at most the timeout.
 */
function counterConnection(): Redis {
  if (counters) return counters;
  counters = createRedis("limits", { enableOfflineQueue: false, maxRetriesPerRequest: 0, commandTimeout: 250, enableAutoPipelining: true });
  counters.on("error", (error: Error) => {
    if (redisDown) return;
    redisDown = true;
    log.warn({ err: error.message }, "limits: Redis unreachable, rates are counted per process until it is back");
  });
  counters.on("ready", () => {
    if (!redisDown) return;
    redisDown = false;
    log.info("limits: Redis is back, rates are counted across processes again");
  });
  return counters;
}

const limiters = new Map<string, RateLimiterRedis>();

/** One limiter per name and value: the Redis key is the same for every value, so a new value keeps the count. */
function limiterFor(name: string, points: number, windowSeconds: number): RateLimiterRedis {
  const id = `${name}/${points}/${windowSeconds}`;
  let limiter = limiters.get(id);
  if (!limiter) {
    limiter = new RateLimiterRedis({
      storeClient: counterConnection(),
      keyPrefix: redisKey("limits", name),
      points,
      duration: windowSeconds,
      rejectIfRedisNotReady: true,
      // A key that has used its window is refused from memory until the window ends: a flood costs Redis nothing.
      inMemoryBlockOnConsumed: points > 0 ? points : undefined,
      insuranceLimiter: new RateLimiterMemory({ points, duration: windowSeconds }),
    });
    limiters.set(id, limiter);
  }
  return limiter;
}

interface RateCheck {
  name: string;
  key: string;
  points: number;
  windowSeconds: number;
  /** Who is counted, for the message: "account", "API key", "user", "address". */
  per: string;
}

const seconds = (ms: number) => Math.max(1, Math.ceil(ms / 1000));

/** Consumes one unit of every check at once (one pipelined Redis round trip); throws when any is used up. */
async function consume(checks: RateCheck[]): Promise<PolicyState[]> {
  const results = await Promise.all(
    checks.map((check) =>
      limiterFor(check.name, check.points, check.windowSeconds)
        .consume(check.key)
        .then(
          (res) => ({ check, res, allowed: true }),
          (error: unknown) => {
            if (error instanceof RateLimiterRes) return { check, res: error, allowed: false };
            // Neither Redis nor the insurance limiter answered: let the request through.
            log.warn({ err: (error as Error).message, limit: check.name }, "limits: rate not counted");
            return undefined;
          },
        ),
    ),
  );
  const policies: PolicyState[] = [];
  let refused: { check: RateCheck; res: RateLimiterRes } | undefined;
  for (const result of results) {
    if (!result) continue;
    const { check, res } = result;
    policies.push({ name: check.name, quota: check.points, windowSeconds: check.windowSeconds, remaining: res.remainingPoints, resetSeconds: seconds(res.msBeforeNext) });
    if (!result.allowed && (!refused || res.msBeforeNext > refused.res.msBeforeNext)) refused = result;
  }
  if (refused) {
    const { check, res } = refused;
    const retry = seconds(res.msBeforeNext);
    const window = check.windowSeconds === 1 ? "second" : `${check.windowSeconds} seconds`;
    throw new LimitExceeded(
      "rate_limited",
      `rate limit ${check.name} reached: ${check.points} per ${window} per ${check.per}; retry in ${retry} s`,
      policies,
      retry,
    );
  }
  return policies;
}

function rate(name: LimitName, key: string, limits: AccountLimits, per: string): RateCheck {
  const definition = definitionOf(name);
  const windowSeconds = definition.kind === "rate" ? definition.windowSeconds : 1;
  return { name, key, points: limits[name], windowSeconds, per };
}

/** A short, stable name for an API key in Redis; the key itself never leaves the process. */
function apiKeyCounter(apiKey: string): string {
  return createHash("sha256").update(apiKey).digest("base64url").slice(0, 22);
}

export interface RequestIdentity {
  accountId: string;
  /** The API key the request carried, when it authenticated with one. */
  apiKey?: string;
}

/** Counts one authenticated request of a route family; returns the policies for the response headers. */
export async function limitRequest(family: RouteFamily, who: RequestIdentity): Promise<PolicyState[]> {
  const limits = await limitsOf(who.accountId);
  const checks = [rate(`requests.${family}`, who.accountId, limits, "account")];
  if (who.apiKey !== undefined) {
    const key = apiKeyCounter(who.apiKey);
    checks.push(rate("requests.per_key", key, limits, "API key"));
    if (family === "token") checks.push(rate("tokens.per_key", key, limits, "API key"));
  }
  return consume(checks);
}

/** Counts one socket frame of a user. */
export async function limitSocketMessage(accountId: string, userId: string): Promise<void> {
  const limits = await limitsOf(accountId);
  await consume([rate("socket.messages", `${accountId}:${userId}`, limits, "user")]);
}

/**
 * Whose count a client address falls in: an IPv4 address itself (also when it arrives
 * IPv4-mapped), an IPv6 address by its /64, since one subscriber usually holds a whole
 * /64 and could otherwise take a fresh address per request.
 */
export function addressCounter(address: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return mapped[1]!;
  if (!address.includes(":")) return address;
  const [head = "", tail] = address.toLowerCase().split("%")[0]!.split("::");
  const left = head === "" ? [] : head.split(":");
  const right = tail === undefined || tail === "" ? [] : tail.split(":");
  const groups = tail === undefined ? left : [...left, ...Array(Math.max(0, 8 - left.length - right.length)).fill("0"), ...right];
  return `${groups
    .slice(0, 4)
    .map((group) => group.replace(/^0+(?=.)/, ""))
    .join(":")}::/64`;
}

/** The routes that need no credential, counted per client address (not per account: they name no caller). */
export async function limitPublicRequest(address: string): Promise<PolicyState[]> {
  const points = config.limits.publicPerIpPerSecond;
  if (points === 0) return [];
  return consume([{ name: "public.per_ip", key: addressCounter(address), points, windowSeconds: 1, per: "address" }]);
}

