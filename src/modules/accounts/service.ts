/**
 * Accounts, their API keys and their signing keys. API keys are stored as SHA-256
 * hashes; signing keys as JWKs. Look-ups on the hot path (API key → account, account →
 * signing key, kid → public key) are cached per process and dropped on a Redis broadcast
 * whenever a key is revoked or rotated, from any process or the admin command line.
 *
 * The signing keys' look-ups on a token's path are signing-keys.ts, the caches' shared
 * lifetime and invalidation list caches.ts.
 */
import { createHash, generateKeyPair as generateNodeKeyPair, randomBytes } from "node:crypto";
import { promisify } from "node:util";
import { and, asc, eq, isNull, sql } from "drizzle-orm";
import { config, type SigningAlgorithm } from "../../core/config";
import { type Database, db } from "../../db/client";
import { AppError } from "../../core/errors";
import { memoize } from "../../core/memo";
import { log } from "../../core/log";
import type { Subscription } from "../../core/pubsub";
import { pubsub } from "../../queue/redis-pubsub";
import { type Cached, clearCaches, fresh, onAccountsInvalidated } from "./caches";
import { openPrivateKey, sealPrivateKey } from "./sealing";
import { accounts, apiKeys, signingKeys } from "./schema";

export interface Account {
  id: string;
  name: string;
  signingAlgorithm: SigningAlgorithm;
  /** The `sub` of media tokens: the Jitsi domain or tenant, or `*`. */
  jitsiDomain: string;
}

const API_KEY_PREFIX = "prl_";

const accountByKeyHash = new Map<string, Cached<Account | null>>();
onAccountsInvalidated(() => accountByKeyHash.clear());

const INVALIDATION_CHANNEL = "invalidate:accounts";

/** Drops every process's cached keys and limits (this one at once, the others through Redis). */
export async function broadcastInvalidation(): Promise<void> {
  clearCaches();
  // Without Redis the others learn it when their cached look-ups expire (CACHE_TTL_MS).
  await pubsub()
    .publish(INVALIDATION_CHANNEL, String(process.pid), { withinMs: 2_000 })
    .catch((error: Error) =>
      log.warn(
        { err: error.message },
        "key change not announced; other processes drop their cached keys within a minute",
      ),
    );
}

let invalidations: Subscription | undefined;

/** Not awaited by callers: the subscription is made whenever Redis answers, so the API starts while Redis is down. */
export function listenForInvalidations(): void {
  // The cache TTL bounds staleness while the subscription is not yet in place.
  invalidations ??= pubsub().subscribe("invalidations", [INVALIDATION_CHANNEL], clearCaches);
}

export async function stopListeningForInvalidations(): Promise<void> {
  await invalidations?.close();
  invalidations = undefined;
}

function randomId(prefix: string, bytes: number): string {
  return `${prefix}${randomBytes(bytes).toString("base64url").replace(/[-_]/g, "x")}`;
}

/** Kept by key (as the limits' counters are): every request with an API key looks its account up by this hash. */
export const hashApiKey = memoize((apiKey: string) => createHash("sha256").update(apiKey).digest("hex"), 10_000);

const generateKeyPair = promisify(generateNodeKeyPair);

function newKeyPair(algorithm: SigningAlgorithm) {
  switch (algorithm) {
    case "RS256":
      return generateKeyPair("rsa", { modulusLength: 2048 });
    case "ES256":
      return generateKeyPair("ec", { namedCurve: "P-256" });
    case "EdDSA":
      return generateKeyPair("ed25519");
  }
}

async function makeSigningKey(accountId: string, algorithm: SigningAlgorithm) {
  const { publicKey, privateKey } = await newKeyPair(algorithm);
  const kid = randomId("", 12);
  const publicJwk = { ...publicKey.export({ format: "jwk" }), kid, alg: algorithm, use: "sig" };
  const privateJwk = sealPrivateKey({ ...privateKey.export({ format: "jwk" }), kid, alg: algorithm });
  return { kid, accountId, algorithm, publicJwk, privateJwk };
}

export interface CreatedApiKey {
  id: number;
  apiKey: string;
  prefix: string;
}

/** A new API key: the row to store (its hash only) and the key to show once. */
function newApiKey(accountId: string, label: string) {
  const apiKey = randomId(API_KEY_PREFIX, 24);
  const prefix = apiKey.slice(0, API_KEY_PREFIX.length + 6);
  return { row: { accountId, prefix, hash: hashApiKey(apiKey), label }, apiKey, prefix };
}

async function insertApiKey(accountId: string, label: string): Promise<CreatedApiKey> {
  const { row: values, apiKey, prefix } = newApiKey(accountId, label);
  const [row] = await db.insert(apiKeys).values(values).returning({ id: apiKeys.id });
  return { id: row!.id, apiKey, prefix };
}

export async function createAccount(
  name: string,
  algorithm: SigningAlgorithm = config.tokens.defaultAlgorithm,
): Promise<{ account: Account; apiKey: CreatedApiKey; kid: string }> {
  const id = randomId("acc_", 9);
  const key = await makeSigningKey(id, algorithm);
  const { row: keyRow, apiKey, prefix } = newApiKey(id, "default");
  // One transaction: a failure part way must not leave an account without its signing key or API key.
  return db.transaction(async (tx) => {
    const [row] = await tx.insert(accounts).values({ id, name, signingAlgorithm: algorithm }).returning();
    await tx.insert(signingKeys).values(key);
    const [stored] = await tx.insert(apiKeys).values(keyRow).returning({ id: apiKeys.id });
    return { account: toAccount(row!), apiKey: { id: stored!.id, apiKey, prefix }, kid: key.kid };
  });
}

function toAccount(row: { id: string; name: string; signingAlgorithm: string; jitsiDomain: string }): Account {
  return {
    id: row.id,
    name: row.name,
    signingAlgorithm: row.signingAlgorithm as SigningAlgorithm,
    jitsiDomain: row.jitsiDomain,
  };
}

export async function getAccount(accountId: string): Promise<Account> {
  const [row] = await db.select().from(accounts).where(eq(accounts.id, accountId));
  if (!row) throw new AppError("not_found", `no account ${accountId}`);
  return toAccount(row);
}

/** A host name (meet.example.com) or a tenant (a single label), lower case as Prosody compares them. */
const JITSI_DOMAIN = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/;

/**
 * Sets the `sub` of the account's media tokens. Jitsi's Prosody, with domain verification
 * on, admits a token to `room@conference.<sub>` (or `[<sub>]room@…` on a multi-tenant
 * deployment) only; `*` admits it to any domain or tenant of that Prosody.
 */
export async function setJitsiDomain(accountId: string, domain: string): Promise<Account> {
  const value = domain.trim().toLowerCase();
  if (value !== "*" && (value.length > 253 || !JITSI_DOMAIN.test(value))) {
    throw new AppError(
      "validation_failed",
      `the Jitsi domain must be a host name such as meet.example.com, a tenant name, or *, got "${domain}"`,
    );
  }
  const [row] = await db.update(accounts).set({ jitsiDomain: value }).where(eq(accounts.id, accountId)).returning();
  if (!row) throw new AppError("not_found", `no account ${accountId}`);
  await broadcastInvalidation();
  return toAccount(row);
}

export async function countAccounts(): Promise<number> {
  return (await db.select({ id: accounts.id }).from(accounts).limit(1)).length;
}

export async function listAccounts() {
  const rows = await db.select().from(accounts).orderBy(asc(accounts.createdAt));
  const keys = await db.select().from(apiKeys).orderBy(asc(apiKeys.id));
  const signing = await db.select().from(signingKeys).orderBy(asc(signingKeys.createdAt));
  return rows.map((account) => ({
    ...account,
    apiKeys: keys
      .filter((key) => key.accountId === account.id)
      .map(({ id, prefix, label, createdAt, revokedAt }) => ({ id, prefix, label, createdAt, revokedAt })),
    signingKeys: signing
      .filter((key) => key.accountId === account.id)
      .map(({ kid, algorithm, createdAt, retiredAt, verifyUntil }) => ({
        kid,
        algorithm,
        createdAt,
        retiredAt,
        verifyUntil,
      })),
  }));
}

export async function createApiKey(accountId: string, label = ""): Promise<CreatedApiKey> {
  await getAccount(accountId);
  return insertApiKey(accountId, label);
}

export async function revokeApiKey(keyId: number): Promise<void> {
  const updated = await db
    .update(apiKeys)
    .set({ revokedAt: new Date() })
    .where(and(eq(apiKeys.id, keyId), isNull(apiKeys.revokedAt)))
    .returning({ id: apiKeys.id });
  if (updated.length === 0) throw new AppError("not_found", `no active API key with id ${keyId}`);
  await broadcastInvalidation();
}

/**
 * Makes a new signing key current. The old one stops signing at once and keeps
 * verifying for the longest token lifetime, so tokens it signed stay valid until they expire.
 */
export async function rotateSigningKey(accountId: string, algorithm?: SigningAlgorithm): Promise<string> {
  const account = await getAccount(accountId);
  const nextAlgorithm = algorithm ?? account.signingAlgorithm;
  const key = await makeSigningKey(accountId, nextAlgorithm);
  const now = new Date();
  await db.transaction(async (tx) => {
    await tx
      .update(signingKeys)
      .set({ retiredAt: now, verifyUntil: new Date(now.getTime() + config.tokens.maxTtlSeconds * 1000) })
      .where(and(eq(signingKeys.accountId, accountId), isNull(signingKeys.retiredAt)));
    await tx.insert(signingKeys).values(key);
    await tx.update(accounts).set({ signingAlgorithm: nextAlgorithm }).where(eq(accounts.id, accountId));
  });
  await broadcastInvalidation();
  return key.kid;
}

/**
 * Withdraws a signing key at once (a leaked key, say): tokens it signed stop verifying, here
 * and at every Jitsi that fetches keys from Parley, and it is no longer published. When it
 * was the account's current key, a new one of the same algorithm takes its place.
 */
export async function revokeSigningKey(kid: string): Promise<{ accountId: string; newKid?: string }> {
  const [key] = await db.select().from(signingKeys).where(eq(signingKeys.kid, kid));
  if (!key) throw new AppError("not_found", `no signing key ${kid}`);
  const replacement = key.retiredAt
    ? undefined
    : await makeSigningKey(key.accountId, key.algorithm as SigningAlgorithm);
  const now = new Date();
  await db.transaction(async (tx) => {
    await tx
      .update(signingKeys)
      .set({ retiredAt: key.retiredAt ?? now, verifyUntil: now })
      .where(eq(signingKeys.kid, kid));
    if (replacement) await tx.insert(signingKeys).values(replacement);
  });
  await broadcastInvalidation();
  return { accountId: key.accountId, ...(replacement && { newKid: replacement.kid }) };
}

/** The account an API key belongs to, or 401 when the key is unknown or revoked. */
export async function accountForApiKey(apiKey: string): Promise<Account> {
  return accountForApiKeyHash(hashApiKey(apiKey));
}

/** As accountForApiKey, for a holder that kept only the key's hash (a console session). */
export async function accountForApiKeyHash(hash: string): Promise<Account> {
  let entry = accountByKeyHash.get(hash);
  if (!fresh(entry)) {
    const [row] = await db
      .select({
        id: accounts.id,
        name: accounts.name,
        signingAlgorithm: accounts.signingAlgorithm,
        jitsiDomain: accounts.jitsiDomain,
      })
      .from(apiKeys)
      .innerJoin(accounts, eq(accounts.id, apiKeys.accountId))
      .where(and(eq(apiKeys.hash, hash), isNull(apiKeys.revokedAt)));
    entry = { value: row ? toAccount(row) : null, at: Date.now() };
    accountByKeyHash.set(hash, entry);
  }
  if (!entry.value) throw new AppError("invalid_api_key", "unknown or revoked API key");
  return entry.value;
}

/**
 * Seals the signing keys an older Parley stored in plain text, in the caller's transaction, once a key
 * already sealed is found to open with this sealing key (openPrivateKey throws, naming the fix, when
 * not). Returns how many it sealed: a second run, here or in a process waiting on the same rows, finds none.
 */
export async function sealPlainSigningKeys(tx: Database): Promise<number> {
  const [sealed] = await tx
    .select({ privateJwk: signingKeys.privateJwk })
    .from(signingKeys)
    .where(sql`${signingKeys.privateJwk} ->> 'sealed' is not null`)
    .limit(1);
  if (sealed) openPrivateKey(sealed.privateJwk);
  const plain = await tx
    .select({ kid: signingKeys.kid, privateJwk: signingKeys.privateJwk })
    .from(signingKeys)
    .where(sql`${signingKeys.privateJwk} ->> 'sealed' is null`)
    .for("update");
  for (const { kid, privateJwk } of plain) {
    await tx
      .update(signingKeys)
      .set({ privateJwk: sealPrivateKey(privateJwk) })
      .where(eq(signingKeys.kid, kid));
  }
  return plain.length;
}
