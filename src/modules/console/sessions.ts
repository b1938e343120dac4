/**
 * Who may use the console: operators (name and password, every account) and account owners
 * (one of the account's API keys, that account only). A sign-in opens a session row; the
 * cookie's short-lived JWT names it, and logout revokes the row.
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { resolve } from "node:path";
import { and, eq, gt, isNull, lt } from "drizzle-orm";
import type { RateLimiterRedis } from "rate-limiter-flexible";
import { config } from "../../core/config";
import { db } from "../../db/client";
import { AppError } from "../../core/errors";
import { secretKeptIn } from "../../core/kept-secret";
import { redis, redisKey } from "../../queue/connection";
import { accountForApiKey, accountForApiKeyHash, hashApiKey } from "../accounts";
import { hashPassword, operatorNamed, operators } from "../operators";
import { consoleSessions } from "./schema";

export type Viewer =
  | { kind: "operator"; sessionId: string; name: string }
  | { kind: "account"; sessionId: string; name: string; accountId: string };

let secret: string | undefined;

/** CONSOLE_SECRET, or one generated on first use and kept in the data folder for every process. */
export function consoleSecret(): string {
  secret ??= config.console.secret ?? secretKeptIn(resolve(config.database.dataDir, "console-secret"));
  return secret;
}

// Compared against when the name is unknown, so a wrong name costs as long as a wrong password.
let decoyHash: Promise<string> | undefined;
function decoy(): Promise<string> {
  decoyHash ??= hashPassword(randomBytes(16).toString("hex"));
  return decoyHash;
}

/** Who is trying to sign in, for the limits: the caller's address and the name (or "api-key") tried. */
export interface LoginAttempt {
  address: string;
  name: string;
}

const LOGIN_WINDOW_SECONDS = 15 * 60;
/** One address may fail this many times more across all names: guessing many names is limited too. */
const ADDRESS_FACTOR = 4;

let limiters:
  | { perName: RateLimiterRedis; perAddress: RateLimiterRedis; isRefusal: (error: unknown) => boolean }
  | undefined;
/** Made at the first sign-in: every API process loads this module, few ever count a sign-in. */
async function loginLimiters() {
  const { RateLimiterRedis, RateLimiterRes } = await import("rate-limiter-flexible");
  const limiter = (scope: string, points: number) =>
    new RateLimiterRedis({
      storeClient: redis(),
      keyPrefix: redisKey("console", "login", scope),
      points,
      duration: LOGIN_WINDOW_SECONDS,
    });
  limiters ??= {
    perName: limiter("name", config.console.loginAttempts),
    perAddress: limiter("address", config.console.loginAttempts * ADDRESS_FACTOR),
    isRefusal: (error) => error instanceof RateLimiterRes,
  };
  return limiters;
}

const nameKey = (attempt: LoginAttempt) => `${attempt.address}|${attempt.name}`;

/** Counts a failed sign-in against the name and the address; past a limit the caller gets 429 until its window ends. */
async function countFailure(attempt: LoginAttempt): Promise<void> {
  const { perName, perAddress, isRefusal } = await loginLimiters();
  const consume = (limiter: RateLimiterRedis, key: string) =>
    limiter.consume(key).catch((error) => {
      if (!isRefusal(error)) throw error;
    });
  await Promise.all([consume(perName, nameKey(attempt)), consume(perAddress, attempt.address)]);
}

/** A successful sign-in clears its name's count; the address's count stays, so one good account cannot reset it. */
async function clearFailures(attempt: LoginAttempt): Promise<void> {
  await (await loginLimiters()).perName.delete(nameKey(attempt));
}

/** The seconds a sign-in must wait (0: it may go ahead), when its name or its address failed too often. */
export async function loginBlockedFor(attempt: LoginAttempt): Promise<number> {
  const { perName, perAddress } = await loginLimiters();
  const [byName, byAddress] = await Promise.all([perName.get(nameKey(attempt)), perAddress.get(attempt.address)]);
  const waits = [
    byName && byName.consumedPoints >= config.console.loginAttempts ? byName.msBeforeNext : 0,
    byAddress && byAddress.consumedPoints >= config.console.loginAttempts * ADDRESS_FACTOR ? byAddress.msBeforeNext : 0,
  ];
  const wait = Math.max(...waits);
  return wait > 0 ? Math.max(1, Math.ceil(wait / 1000)) : 0;
}

async function openSession(values: { operatorId?: number; accountId?: string; apiKeyHash?: string }): Promise<string> {
  // Sessions past their end are of no use, even for the record: each sign-in sweeps them away.
  await db.delete(consoleSessions).where(lt(consoleSessions.expiresAt, new Date()));
  const id = randomBytes(18).toString("base64url");
  await db
    .insert(consoleSessions)
    .values({ id, ...values, expiresAt: new Date(Date.now() + config.console.sessionMaxSeconds * 1000) });
  return id;
}

export async function operatorLogin(name: string, password: string, attempt: LoginAttempt): Promise<Viewer> {
  const operator = await operatorNamed(name);
  const matches = await Bun.password.verify(password, operator?.passwordHash ?? (await decoy()));
  if (!operator || !matches) {
    await countFailure(attempt);
    throw new AppError("unauthorized", "wrong operator name or password");
  }
  await clearFailures(attempt);
  return { kind: "operator", sessionId: await openSession({ operatorId: operator.id }), name: operator.name };
}

export async function accountLogin(apiKey: string, attempt: LoginAttempt): Promise<Viewer> {
  let account: Awaited<ReturnType<typeof accountForApiKey>>;
  try {
    account = await accountForApiKey(apiKey);
  } catch (error) {
    if (error instanceof AppError && error.code === "invalid_api_key") await countFailure(attempt);
    throw error;
  }
  await clearFailures(attempt);
  const sessionId = await openSession({ accountId: account.id, apiKeyHash: hashApiKey(apiKey) });
  return { kind: "account", sessionId, name: account.name, accountId: account.id };
}

/** The viewer of a live session, or 401 when it was revoked, expired or never existed. */
export async function sessionViewer(sessionId: string): Promise<Viewer> {
  const [row] = await db
    .select({ id: consoleSessions.id, apiKeyHash: consoleSessions.apiKeyHash, operatorName: operators.name })
    .from(consoleSessions)
    .leftJoin(operators, eq(operators.id, consoleSessions.operatorId))
    .where(
      and(
        eq(consoleSessions.id, sessionId),
        isNull(consoleSessions.revokedAt),
        gt(consoleSessions.expiresAt, new Date()),
      ),
    );
  if (!row) throw new AppError("unauthorized", "the console session has ended; sign in again");
  if (row.operatorName) return { kind: "operator", sessionId, name: row.operatorName };
  // The key the owner signed in with must still be good: revoking it ends the session at once.
  const account = await accountForApiKeyHash(row.apiKeyHash!).catch(() => {
    throw new AppError("unauthorized", "the API key this session signed in with was revoked; sign in again");
  });
  return { kind: "account", sessionId, name: account.name, accountId: account.id };
}

export async function revokeSession(sessionId: string): Promise<void> {
  await db.update(consoleSessions).set({ revokedAt: new Date() }).where(eq(consoleSessions.id, sessionId));
}

/** The CSRF token of a session: derived, so nothing more is stored, and useless without the session cookie. */
export function csrfToken(sessionId: string): string {
  return createHmac("sha256", consoleSecret()).update(`csrf:${sessionId}`).digest("base64url");
}

export function csrfMatches(sessionId: string, given: string | undefined): boolean {
  const expected = Buffer.from(csrfToken(sessionId));
  const actual = Buffer.from(given ?? "");
  return actual.length === expected.length && timingSafeEqual(actual, expected);
}

/** The account a request may look at: an account owner's own; an operator's choice. */
export function accountInView(viewer: Viewer, requested: string | undefined): string | undefined {
  if (viewer.kind === "account") {
    if (requested !== undefined && requested !== "" && requested !== viewer.accountId) {
      throw new AppError("forbidden", "this console session may see only its own account");
    }
    return viewer.accountId;
  }
  return requested || undefined;
}

export function requireAccount(viewer: Viewer, requested: string | undefined): string {
  const accountId = accountInView(viewer, requested);
  if (!accountId) throw new AppError("validation_failed", "account: choose an account");
  return accountId;
}

export function requireOperator(viewer: Viewer): void {
  if (viewer.kind !== "operator") throw new AppError("forbidden", "only an operator may do this");
}
