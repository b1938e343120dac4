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
 */
import { createHash } from "node:crypto";
import type { Result } from "ioredis";
import type { RateLimiterMemory } from "rate-limiter-flexible";
import { config } from "../../core/config";
import { log } from "../../core/log";
import { memoize } from "../../core/memo";
import type { PolicyState } from "../../http/ratelimit";
import { createRedis, onCluster, type RedisClient, redisKey, tagged } from "../../queue/connection";
import { definitionOf, type LimitName, type RouteFamily } from "./definitions";
import { type AccountLimits, LimitExceeded, limitsOf } from "./service";

declare module "ioredis" {
  interface RedisCommander<Context> {
    /**
     * KEYS: the counters; ARGV: each one's window in seconds, then limit, then
     * units wanted. Returns units granted, count and ms left of each, in turn.
     */
    claimRates(...keysThenArgs: Array<string | number>): Result<number[], Context>;
  }
}

/**
 * Grants each counter the units asked for, as far as its window's limit allows, and counts
 * them: the count never passes the limit, so what every process was granted together never does.
 */
const CLAIM_RATES = `
local n = #KEYS
local out = {}
for i = 1, n do
  local window = tonumber(ARGV[i])
  local limit = tonumber(ARGV[n + i])
  local want = tonumber(ARGV[2 * n + i])
  redis.call('set', KEYS[i], 0, 'EX', window, 'NX')
  local used = tonumber(redis.call('get', KEYS[i]))
  local grant = math.max(0, math.min(want, limit - used))
  if grant > 0 then used = redis.call('incrby', KEYS[i], grant) end
  local ttl = redis.call('pttl', KEYS[i])
  if ttl < 0 then
    redis.call('expire', KEYS[i], window)
    ttl = 1000 * window
  end
  out[3 * i - 2] = grant
  out[3 * i - 1] = used
  out[3 * i] = ttl
end
return out`;

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

export interface RateCheck {
  name: string;
  key: string;
  points: number;
  windowSeconds: number;
  /** Who is counted, for the message: "account", "API key", "user", "address". */
  per: string;
}

export interface Counted {
  allowed: boolean;
  remaining: number;
  msBeforeNext: number;
}

/** The Redis key prefix of a limit's counters, as rate-limiter-flexible named them (one per limit name). */
const counterPrefix = memoize((name: string) => redisKey("limits", name), 1_000);

/**
 * How far ahead a busy process leases: the units it expects to spend in this long, at the
 * pace it spent its last lease. A counter at 15,000 requests/s in one process is then claimed
 * about 20 times a second.
 */
const LEASE_AHEAD_MS = 50;
/**
 * A lease taken ahead of need holds at most this share of the limit, so the units other
 * processes may be holding when one is refused stay a small part of the budget. Limits under
 * 16 are never leased ahead: every unit is claimed when a request needs it.
 */
const LEASE_SHARE = 16;
const LEASE_SWEEP_SIZE = 10_000;

/** This process's lease on one counter, for one limit value (a changed limit starts a new lease). */
interface Lease {
  redisKey: string;
  check: RateCheck;
  /** Units granted and not yet spent. */
  units: number;
  /** Redis's count after this process's last claim. */
  used: number;
  /** When the window ends by this process's clock; never after Redis expires the counter. */
  endsAt: number;
  /** Redis granted less than asked: nothing is left in this window. */
  spent: boolean;
  /** Requests waiting for the next claim, in the order they asked. */
  waiting: Array<(counted: Counted | undefined) => void>;
  /** Units to ask beyond the waiting requests. */
  ahead: number;
  claiming: boolean;
  /** When the last claim was answered, and the units spent since, to pace the next lease. */
  claimedAt: number;
  spentSince: number;
}

/**
 * Counts rates against budgets shared through Redis, with the units leased by this instance
 * held in its own memory. Each API process has one (`rates` below); tests make several to
 * stand for several processes.
 */
export class RateLeases {
  private readonly leases = new Map<string, Lease>();
  /** Leases with a claim to send in this turn's script call. */
  private due: Lease[] = [];
  /** The per-process counters that stand in while Redis cannot answer. */
  private readonly insurance = new Map<string, RateLimiterMemory>();
  private readonly defined = new WeakSet<RedisClient>();

  constructor(private readonly connection: () => RedisClient) {}

  /**
   * Spends one unit of `check`: at once from a lease, or after the
   * claim this turn sends; `undefined` when nothing could count it.
   */
  take(check: RateCheck, now: number): Counted | Promise<Counted | undefined> {
    const lease = this.leaseOf(check, now);
    if (lease.units > 0) {
      lease.units--;
      lease.spentSince++;
      // Claim the next lease while this one still has half of its units, so requests find units waiting.
      if (lease.ahead > 0 && !lease.spent && !lease.claiming && lease.units * 2 <= lease.ahead) this.claim(lease);
      return {
        allowed: true,
        remaining: Math.max(0, check.points - lease.used + lease.units),
        msBeforeNext: lease.endsAt - now,
      };
    }
    if (lease.spent) return { allowed: false, remaining: 0, msBeforeNext: lease.endsAt - now };
    return new Promise((done) => {
      lease.waiting.push(done);
      if (!lease.claiming) this.claim(lease);
    });
  }

  private leaseOf(check: RateCheck, now: number): Lease {
    const id = `${check.name}/${check.points}/${check.windowSeconds}:${check.key}`;
    let lease = this.leases.get(id);
    if (lease && lease.endsAt <= now && (lease.units > 0 || lease.spent)) {
      // A new window: what was left of the last one is gone with it.
      lease.units = 0;
      lease.used = 0;
      lease.spent = false;
    }
    if (!lease) {
      if (this.leases.size >= LEASE_SWEEP_SIZE) {
        for (const [key, old] of this.leases) if (old.endsAt <= now && !old.claiming) this.leases.delete(key);
      }
      lease = {
        // On a Cluster the counted subject is the key's slot: a script call takes one subject's counters.
        redisKey: `${counterPrefix(check.name)}:${tagged(check.key)}`,
        check,
        units: 0,
        used: 0,
        endsAt: 0,
        spent: false,
        waiting: [],
        ahead: 0,
        claiming: false,
        claimedAt: 0,
        spentSince: 0,
      };
      this.leases.set(id, lease);
    }
    return lease;
  }

  /** Puts the lease in this turn's script call. */
  private claim(lease: Lease): void {
    lease.claiming = true;
    if (this.due.length === 0) setImmediate(() => this.sendClaims());
    this.due.push(lease);
  }

  private sendClaims(): void {
    const batch = this.due;
    this.due = [];
    this.claimBatch(batch).catch((error: Error) => {
      // Whatever went wrong, no request is left waiting: the waiting ones count in memory.
      log.warn({ err: error.message }, "limits: rates counted in memory after an unexpected error");
      for (const lease of batch) this.settle(lease, undefined, Date.now());
    });
  }

  private async claimBatch(batch: Lease[]): Promise<void> {
    const connection = this.connection();
    const sentAt = Date.now();
    const wants = batch.map((lease) => {
      const elapsed = sentAt - lease.claimedAt;
      // Lease ahead only at a pace that would use the units soon; a quiet counter claims what waits.
      const pace = lease.claimedAt > 0 && elapsed < 1_000 ? lease.spentSince / Math.max(elapsed, 1) : 0;
      lease.ahead = Math.min(Math.floor(lease.check.points / LEASE_SHARE), Math.ceil(pace * LEASE_AHEAD_MS));
      return lease.waiting.length + lease.ahead;
    });
    // A script's keys must share a slot on a Cluster: one call per counted subject there (its key's tag).
    const groups = new Map<string, number[]>();
    batch.forEach((lease, i) => {
      const subject = onCluster() ? lease.check.key : "";
      const group = groups.get(subject);
      if (group) group.push(i);
      else groups.set(subject, [i]);
    });
    await Promise.all(
      [...groups.values()].map((indexes) =>
        this.claimGroup(
          connection,
          indexes.map((i) => batch[i]!),
          indexes.map((i) => wants[i]!),
          sentAt,
        ),
      ),
    );
  }

  private async claimGroup(connection: RedisClient, batch: Lease[], wants: number[], sentAt: number): Promise<void> {
    let answer: number[] | undefined;
    if (connection.status === "ready") {
      if (!this.defined.has(connection)) {
        connection.defineCommand("claimRates", { lua: CLAIM_RATES });
        this.defined.add(connection);
      }
      const args: Array<string | number> = batch.map((lease) => lease.redisKey);
      for (const lease of batch) args.push(lease.check.windowSeconds);
      for (const lease of batch) args.push(lease.check.points);
      args.push(...wants);
      answer = await connection.claimRates(batch.length, ...args).catch(() => undefined);
    }
    const now = Date.now();
    for (let i = 0; i < batch.length; i++) {
      const lease = batch[i]!;
      if (!answer) {
        this.settle(lease, undefined, now);
        continue;
      }
      const granted = answer[3 * i]!;
      lease.units += granted;
      lease.used = answer[3 * i + 1]!;
      // Measured from the moment the claim was sent, the window never ends later here than in Redis.
      lease.endsAt = sentAt + answer[3 * i + 2]!;
      lease.spent = granted < wants[i]!;
      // Granted in a window that has ended since: the units went with it, the waiting requests claim again.
      if (lease.endsAt <= now) {
        lease.units = 0;
        lease.spent = false;
      }
      lease.claimedAt = now;
      lease.spentSince = 0;
      this.settle(lease, lease, now);
    }
  }

  /** Answers the requests waiting on a lease from its units, or from memory when Redis did not answer. */
  private settle(lease: Lease, claimed: Lease | undefined, now: number): void {
    lease.claiming = false;
    const waiting = lease.waiting;
    lease.waiting = [];
    const { check } = lease;
    if (!claimed) {
      for (const done of waiting) this.countInMemory(check).then(done);
      return;
    }
    for (let i = 0; i < waiting.length; i++) {
      const done = waiting[i]!;
      if (lease.units > 0) {
        lease.units--;
        lease.spentSince++;
        done({
          allowed: true,
          remaining: Math.max(0, check.points - lease.used + lease.units),
          msBeforeNext: lease.endsAt - now,
        });
      } else if (lease.spent) {
        done({ allowed: false, remaining: 0, msBeforeNext: lease.endsAt - now });
      } else {
        // Requests that came while the claim was out, or a window that ended under it: the next claim is theirs.
        lease.waiting = waiting.slice(i);
        this.claim(lease);
        return;
      }
    }
  }

  private async countInMemory(check: RateCheck): Promise<Counted | undefined> {
    // Loaded only once Redis has failed: a process whose Redis answers never counts in memory.
    const { RateLimiterMemory, RateLimiterRes } = await import("rate-limiter-flexible");
    const id = `${check.name}/${check.points}/${check.windowSeconds}`;
    let limiter = this.insurance.get(id);
    if (!limiter) {
      limiter = new RateLimiterMemory({ keyPrefix: id, points: check.points, duration: check.windowSeconds });
      this.insurance.set(id, limiter);
    }
    try {
      const res = await limiter.consume(check.key);
      return { allowed: true, remaining: res.remainingPoints, msBeforeNext: res.msBeforeNext };
    } catch (error) {
      if (error instanceof RateLimiterRes)
        return { allowed: false, remaining: error.remainingPoints, msBeforeNext: error.msBeforeNext };
      // Neither Redis nor the memory limiter answered: let the request through.
      log.warn({ err: (error as Error).message, limit: check.name }, "limits: rate not counted");
      return undefined;
    }
  }
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
