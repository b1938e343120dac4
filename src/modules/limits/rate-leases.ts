/**
 * The leases behind the rate limits: each process claims units of a counter's budget from
 * Redis (one script call for every counter it needs in one turn of the event loop) and spends
 * them in memory, claiming the next lease ahead of need when requests come fast. Redis never
 * grants more than the limit, so the processes together never admit more than it. When Redis
 * cannot answer, each process counts in its own memory (rate-limiter-flexible's memory limiter).
 * Apart from the limits themselves (rates.ts) so that tests can make several instances to
 * stand for several processes.
 */
import type { Result } from "ioredis";
import type { RateLimiterMemory } from "rate-limiter-flexible";
import { log } from "../../core/log";
import { memoize } from "../../core/memo";
import { onCluster, type RedisClient, redisKey, tagged } from "../../queue/connection";

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
 * held in its own memory. Each API process has one (`rates` in rates.ts); tests make several to
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
