/**
 * Rates (requests, tokens, socket frames), counted in Redis so every process shares one
 * budget per account, API key, user or address and window. Windows are fixed, as
 * rate-limiter-flexible counts them (a window starts at a counter's first unit and expires
 * with its key). A process does not ask Redis for every request: it leases units of a
 * counter's budget (one script call claims them, for every counter the process needs in one
 * turn of the event loop) and spends them in memory, claiming the next lease ahead of need
 * when requests come fast. Redis never grants more than the limit, so the processes together
 * never admit more than it; a process may be refused while another still holds leased units
 * (docs/limits.md states the bound).
 *
 * When Redis cannot answer, each process counts in its own memory (rate-limiter-flexible's
 * memory limiter): a flood is still slowed, while the totals are per process until Redis is back.
 *
 * The leases are rate-leases.ts; here are the limits counted with them.
 */
import { createHash } from "node:crypto";
import { config } from "../../core/config";
import { log } from "../../core/log";
import { memoize } from "../../core/memo";
import type { PolicyState } from "../../http/ratelimit";
import { createRedis, type RedisClient } from "../../queue/connection";
import { definitionOf, type LimitName, type RouteFamily } from "./definitions";
import { type Counted, type RateCheck, RateLeases } from "./rate-leases";
import { type AccountLimits, LimitExceeded, limitsOf } from "./service";

let counters: RedisClient | undefined;
let redisDown = false;

/**
 * The connection the counters use: it never queues a command while Redis is away and
 * gives up on a slow answer, so a Redis outage costs a request at most the timeout.
 */
function counterConnection(): RedisClient {
  if (counters) return counters;
  // No auto-pipelining: a lease claims every counter a turn needs in one command.
  counters = createRedis("limits", { enableOfflineQueue: false, maxRetriesPerRequest: 0, commandTimeout: 250 });
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

const rates = new RateLeases(counterConnection);

/**
 * The end of this turn of the event loop, one timer for every request that asks. A request
 * answered from leases still waits for it: the HTTP server then writes the answers of a turn
 * together, which costs less CPU per request than writing each answer on its own.
 */
let turnEnd: Promise<void> | undefined;
function endOfTurn(): Promise<void> {
  turnEnd ??= new Promise<void>((resolve) =>
    setImmediate(() => {
      turnEnd = undefined;
      resolve();
    }),
  );
  return turnEnd;
}

const seconds = (ms: number) => Math.max(1, Math.ceil(ms / 1000));

/**
 * Consumes one unit of every check (from this process's leases, or one Redis round trip); throws when any is used up.
 */
async function consume(checks: RateCheck[]): Promise<PolicyState[]> {
  const now = Date.now();
  const taken = checks.map((check) => rates.take(check, now));
  let results: Array<Counted | undefined>;
  if (taken.some((result) => result instanceof Promise)) results = await Promise.all(taken);
  else {
    await endOfTurn();
    results = taken as Counted[];
  }
  const policies: PolicyState[] = [];
  let refused: { check: RateCheck; result: Counted } | undefined;
  for (let i = 0; i < checks.length; i++) {
    const check = checks[i]!;
    const result = results[i];
    if (!result) continue;
    policies.push({
      name: check.name,
      quota: check.points,
      windowSeconds: check.windowSeconds,
      remaining: result.remaining,
      resetSeconds: seconds(result.msBeforeNext),
    });
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
 * A short, stable name for an API key (or a token) in Redis and in the caps' counts; the
 * credential itself is kept nowhere. Only credentials that authenticated get here; the bound
 * keeps a process with very many of them in check.
 */
export const credentialCounter = memoize(
  (apiKey: string) => createHash("sha256").update(apiKey).digest("base64url").slice(0, 22),
  10_000,
);

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
    const key = credentialCounter(who.apiKey);
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
  const groups =
    tail === undefined ? left : [...left, ...Array(Math.max(0, 8 - left.length - right.length)).fill("0"), ...right];
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
