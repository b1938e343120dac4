/**
 * Rates (requests, tokens, socket frames), counted in Redis so every process shares one
 * counter per account, API key, user or address. Windows are fixed, as rate-limiter-flexible
 * counts them (its Redis keys and script, extended to several counters): the counters of
 * every request that reaches its check in one turn of the event loop are counted together,
 * by one script call in one round trip.
 *
 * When Redis cannot answer, each process counts in its own memory (rate-limiter-flexible's
 * memory limiter): a flood is still slowed, while the totals are per process until Redis is back.
 */
import { createHash } from "node:crypto";
import type { Redis, Result } from "ioredis";
import { RateLimiterMemory, RateLimiterRes } from "rate-limiter-flexible";
import { config } from "../../config";
import { log } from "../../core/log";
import { memoize } from "../../core/memo";
import type { PolicyState } from "../../http/ratelimit";
import { createRedis, redisKey } from "../../queue/connection";
import { definitionOf, type LimitName, type RouteFamily } from "./catalog";
import { type AccountLimits, LimitExceeded, limitsOf } from "./service";

declare module "ioredis" {
  interface RedisCommander<Context> {
    /** KEYS: the counters; ARGV: each one's window in seconds, then each one's units. Returns count and ms left of each, in turn. */
    countRates(...keysThenArgs: Array<string | number>): Result<number[], Context>;
  }
}

/**
 * rate-limiter-flexible's fixed-window step (a window starts at a counter's first unit and
 * expires with it), for every counter the waiting requests move. The count goes on past the
 * limit, so a refused request still counts against its other counters, as separate calls did.
 */
const COUNT_RATES = `
local n = #KEYS
local out = {}
for i = 1, n do
  local window = tonumber(ARGV[i])
  redis.call('set', KEYS[i], 0, 'EX', window, 'NX')
  local consumed = redis.call('incrby', KEYS[i], ARGV[n + i])
  local ttl = redis.call('pttl', KEYS[i])
  if ttl == -1 then
    redis.call('expire', KEYS[i], window)
    ttl = 1000 * window
  end
  out[2 * i - 1] = consumed
  out[2 * i] = ttl
end
return out`;

let counters: Redis | undefined;
let redisDown = false;

/**
 * The connection the counters use: it never queues a command while Redis is away and
 * gives up on a slow answer, so a Redis outage costs a request at most the timeout.
 */
function counterConnection(): Redis {
  if (counters) return counters;
  // No auto-pipelining: countWaiting already sends one command for every request of a turn.
  counters = createRedis("limits", { enableOfflineQueue: false, maxRetriesPerRequest: 0, commandTimeout: 250 });
  counters.defineCommand("countRates", { lua: COUNT_RATES });
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

interface RateCheck {
  name: string;
  key: string;
  points: number;
  windowSeconds: number;
  /** Who is counted, for the message: "account", "API key", "user", "address". */
  per: string;
}

interface Counted {
  allowed: boolean;
  remaining: number;
  msBeforeNext: number;
}

/**
 * Counters that have used their window, refused from this process's memory until it ends:
 * a flood costs Redis nothing. Per limit value, so a raised limit asks Redis again at once.
 */
const blockedUntil = new Map<string, number>();
const BLOCKED_SWEEP_SIZE = 10_000;

const blockId = (check: RateCheck) => `${check.name}/${check.points}/${check.windowSeconds}:${check.key}`;

function block(check: RateCheck, ms: number, now: number): void {
  if (blockedUntil.size >= BLOCKED_SWEEP_SIZE) {
    for (const [id, until] of blockedUntil) if (until <= now) blockedUntil.delete(id);
  }
  blockedUntil.set(blockId(check), now + ms);
}

function blockedFor(check: RateCheck, now: number): number {
  if (blockedUntil.size === 0) return 0;
  const until = blockedUntil.get(blockId(check));
  if (until === undefined) return 0;
  if (until > now) return until - now;
  blockedUntil.delete(blockId(check));
  return 0;
}

/** The per-process counters that stand in while Redis cannot answer. */
const insurance = new Map<string, RateLimiterMemory>();

async function countInMemory(check: RateCheck): Promise<Counted | undefined> {
  const id = `${check.name}/${check.points}/${check.windowSeconds}`;
  let limiter = insurance.get(id);
  if (!limiter) {
    limiter = new RateLimiterMemory({ keyPrefix: id, points: check.points, duration: check.windowSeconds });
    insurance.set(id, limiter);
  }
  try {
    const res = await limiter.consume(check.key);
    return { allowed: true, remaining: res.remainingPoints, msBeforeNext: res.msBeforeNext };
  } catch (error) {
    if (error instanceof RateLimiterRes) return { allowed: false, remaining: error.remainingPoints, msBeforeNext: error.msBeforeNext };
    // Neither Redis nor the memory limiter answered: let the request through.
    log.warn({ err: (error as Error).message, limit: check.name }, "limits: rate not counted");
    return undefined;
  }
}

/** The Redis key prefix of a limit's counters, as rate-limiter-flexible named them (one per limit name). */
const counterPrefix = memoize((name: string) => redisKey("limits", name), 1_000);

interface Waiting {
  checks: RateCheck[];
  done: (results: Array<Counted | undefined>) => void;
}

/** Requests waiting for the next script call; the requests of one turn of the event loop share it. */
let waiting: Waiting[] = [];

/**
 * Counts `checks` with the other requests of this turn of the event loop in one script call.
 * A counter several of them move is raised once by their number, and each is given the count
 * it would have had alone, in the order they asked, so the counts are exact as before.
 */
function countInRedis(checks: RateCheck[]): Promise<Array<Counted | undefined>> {
  return new Promise((done) => {
    if (waiting.length === 0) setImmediate(countWaiting);
    waiting.push({ checks, done });
  });
}

function countWaiting(): void {
  const batch = waiting;
  waiting = [];
  countBatch(batch).catch((error: Error) => {
    // Whatever went wrong, no request is left waiting: the batch counts in memory (an answered request keeps its answer).
    log.warn({ err: error.message }, "limits: rates counted in memory after an unexpected error");
    for (const { checks, done } of batch) Promise.all(checks.map(countInMemory)).then(done);
  });
}

async function countBatch(batch: Waiting[]): Promise<void> {
  const connection = counterConnection();
  const uses = new Map<string, { index: number; units: number; window: number }>();
  const slots = batch.map(({ checks }) =>
    checks.map((check) => {
      const key = `${counterPrefix(check.name)}:${check.key}`;
      let use = uses.get(key);
      if (!use) {
        use = { index: uses.size, units: 0, window: check.windowSeconds };
        uses.set(key, use);
      }
      use.units++;
      return { index: use.index, nth: use.units };
    }),
  );
  let answer: number[] | undefined;
  if (connection.status === "ready") {
    const args: Array<string | number> = [...uses.keys()];
    for (const use of uses.values()) args.push(use.window);
    for (const use of uses.values()) args.push(use.units);
    answer = await connection.countRates(uses.size, ...args).catch(() => undefined);
  }
  const units = [...uses.values()].map((use) => use.units);
  const now = Date.now();
  for (let r = 0; r < batch.length; r++) {
    const { checks, done } = batch[r]!;
    if (!answer) {
      Promise.all(checks.map(countInMemory)).then(done);
      continue;
    }
    const counted = answer;
    done(
      checks.map((check, c) => {
        const { index, nth } = slots[r]![c]!;
        const consumed = counted[2 * index]! - units[index]! + nth;
        const msBeforeNext = counted[2 * index + 1]!;
        if (check.points > 0 && consumed >= check.points) block(check, msBeforeNext, now);
        return { allowed: consumed <= check.points, remaining: Math.max(check.points - consumed, 0), msBeforeNext };
      }),
    );
  }
}

const seconds = (ms: number) => Math.max(1, Math.ceil(ms / 1000));

/** Consumes one unit of every check at once (one Redis round trip); throws when any is used up. */
async function consume(checks: RateCheck[]): Promise<PolicyState[]> {
  const now = Date.now();
  const results: Array<Counted | undefined> = checks.map((check) => {
    const ms = blockedFor(check, now);
    return ms > 0 ? { allowed: false, remaining: 0, msBeforeNext: ms } : undefined;
  });
  const open = checks.filter((_, i) => results[i] === undefined);
  if (open.length > 0) {
    const counted = await countInRedis(open);
    let next = 0;
    for (let i = 0; i < checks.length; i++) if (results[i] === undefined) results[i] = counted[next++];
  }
  const policies: PolicyState[] = [];
  let refused: { check: RateCheck; result: Counted } | undefined;
  for (let i = 0; i < checks.length; i++) {
    const check = checks[i]!;
    const result = results[i];
    if (!result) continue;
    policies.push({ name: check.name, quota: check.points, windowSeconds: check.windowSeconds, remaining: result.remaining, resetSeconds: seconds(result.msBeforeNext) });
    if (!result.allowed && (!refused || result.msBeforeNext > refused.result.msBeforeNext)) refused = { check, result };
  }
  if (refused) {
    const { check, result } = refused;
    const retry = seconds(result.msBeforeNext);
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

/**
 * A short, stable name for an API key in Redis; the key itself never leaves the process. Only
 * keys that authenticated get here; the bound keeps a process with very many of them in check.
 */
const apiKeyCounter = memoize((apiKey: string) => createHash("sha256").update(apiKey).digest("base64url").slice(0, 22), 10_000);

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

