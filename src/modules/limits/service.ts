/**
 * Per-account limits: an account's values are its overrides in `account_limits` over the
 * defaults in definitions.ts, cached per process and dropped with the account caches. Rates are
 * counted in rates.ts (Redis), quotas checked in quotas.ts (PostgreSQL).
 */
import { and, eq } from "drizzle-orm";
import { db } from "../../db/client";
import { AppError } from "../../core/errors";
import { log } from "../../core/log";
import type { PolicyState } from "../../http/ratelimit";
import { broadcastInvalidation, getAccount, onAccountsInvalidated } from "../accounts";
import { definitionOf, isLimitName, LIMITS, type LimitName } from "./definitions";
import { accountLimits, quotaUsage } from "./schema";

export type AccountLimits = Record<LimitName, number>;

/** A limit that is used up: 429 with `rate_limited` or `quota_exceeded`, and the RateLimit headers. */
export class LimitExceeded extends AppError {
  constructor(
    code: "rate_limited" | "quota_exceeded",
    message: string,
    readonly policies: PolicyState[],
    readonly retryAfterSeconds: number,
    /** Members the route's clients expect beside `error`, such as startRecording's `started: false`. */
    extra: Record<string, unknown> = {},
  ) {
    super(code, message, { ...extra, retry_after: retryAfterSeconds });
  }
}

/** Same bound as the account caches: a missed broadcast is healed within a minute. */
const CACHE_TTL_MS = 60_000;
/** After a failed read, how long the fallback values serve before the database is asked again. */
const RETRY_AFTER_FAILURE_MS = 5_000;
const cached = new Map<string, { value: AccountLimits; at: number }>();
onAccountsInvalidated(() => cached.clear());

function defaults(): AccountLimits {
  return Object.fromEntries(
    Object.entries(LIMITS).map(([name, definition]) => [name, definition.default]),
  ) as AccountLimits;
}

/** The account's limits (defaults with its overrides). Read it before a transaction: it may query. */
export async function limitsOf(accountId: string): Promise<AccountLimits> {
  const entry = cached.get(accountId);
  if (entry && Date.now() - entry.at < CACHE_TTL_MS) return entry.value;
  let rows: Array<{ name: string; value: number }>;
  try {
    rows = await db
      .select({ name: accountLimits.name, value: accountLimits.value })
      .from(accountLimits)
      .where(eq(accountLimits.accountId, accountId));
  } catch (error) {
    // A socket relay needs no database; its rate check must not start needing one. Keep
    // what was known (or the defaults) and ask again a few seconds later.
    const value = entry?.value ?? defaults();
    log.warn(
      { err: (error as Error).message, accountId },
      "limits: the account's limits could not be read; using the last known or default values",
    );
    cached.set(accountId, { value, at: Date.now() - CACHE_TTL_MS + RETRY_AFTER_FAILURE_MS });
    return value;
  }
  const value = defaults();
  for (const row of rows) if (isLimitName(row.name)) value[row.name] = row.value;
  cached.set(accountId, { value, at: Date.now() });
  return value;
}

export function parseLimitName(name: string): LimitName {
  if (!isLimitName(name))
    throw new AppError("bad_request", `no limit "${name}"; the limits are ${Object.keys(LIMITS).join(", ")}`);
  return name;
}

/** Gives the account its own value, or its default back with `null`; every process sees it at once. */
export async function setLimit(accountId: string, name: LimitName, value: number | null): Promise<void> {
  await getAccount(accountId);
  if (value === null) {
    await db.delete(accountLimits).where(and(eq(accountLimits.accountId, accountId), eq(accountLimits.name, name)));
  } else {
    if (!Number.isSafeInteger(value) || value < 0)
      throw new AppError("bad_request", `a limit is a whole number of at least 0, got ${value}`);
    await db
      .insert(accountLimits)
      .values({ accountId, name, value })
      .onConflictDoUpdate({
        target: [accountLimits.accountId, accountLimits.name],
        set: { value, updatedAt: new Date() },
      });
  }
  await broadcastInvalidation();
}

export interface LimitReport {
  name: LimitName;
  value: number;
  default: number;
  overridden: boolean;
  /** "per second", "per 2 seconds", or "at once" / "stored" for quotas. */
  per: string;
  description: string;
  /** What the account uses now, for the quotas counted in the database. */
  used?: number;
}

export async function reportLimits(accountId: string): Promise<LimitReport[]> {
  await getAccount(accountId);
  const rows = await db.select().from(accountLimits).where(eq(accountLimits.accountId, accountId));
  const overrides = new Map(rows.map((row) => [row.name, row.value]));
  const chatBytes = await storedChatBytes(accountId);
  return (Object.keys(LIMITS) as LimitName[]).map((name) => {
    const definition = definitionOf(name);
    const value = overrides.get(name) ?? definition.default;
    const per =
      definition.kind === "rate"
        ? `per ${definition.windowSeconds === 1 ? "second" : `${definition.windowSeconds} seconds`} ` +
          `per ${definition.per}`
        : name === "chat.stored_bytes"
          ? "stored"
          : "at once";
    return {
      name,
      value,
      default: definition.default,
      overridden: overrides.has(name),
      per,
      description: definition.description,
      ...(name === "chat.stored_bytes" ? { used: chatBytes } : {}),
    };
  });
}

export async function storedChatBytes(accountId: string): Promise<number> {
  const [row] = await db
    .select({ chatBytes: quotaUsage.chatBytes })
    .from(quotaUsage)
    .where(eq(quotaUsage.accountId, accountId));
  return row?.chatBytes ?? 0;
}
