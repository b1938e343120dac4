/**
 * The signing keys as tokens use them: the account's current key that signs, the public key
 * that verifies a kid, and the keys published to Jitsi (as a JWK Set, or as PEM by hashed kid).
 * Each look-up is cached per process and dropped with the accounts' caches (caches.ts). Apart
 * from the changes to the keys (made, rotated, revoked: service.ts), which are the operator's,
 * while these are on every token's path.
 */
import { createPrivateKey, createPublicKey, type KeyObject } from "node:crypto";
import { and, asc, eq, gt, isNull, or, sql } from "drizzle-orm";
import { type CryptoKey, importJWK, type JWK } from "jose";
import type { SigningAlgorithm } from "../../core/config";
import { AppError } from "../../core/errors";
import { db } from "../../db/client";
import { type Cached, fresh, onAccountsInvalidated } from "./caches";
import { openPrivateKey } from "./sealing";
import { signingKeys } from "./schema";

export interface SigningKey {
  kid: string;
  algorithm: SigningAlgorithm;
  privateKey: KeyObject;
}

export interface VerificationKey {
  kid: string;
  accountId: string;
  algorithm: SigningAlgorithm;
  publicKey: CryptoKey;
  verifyUntil: Date | null;
}

const signingKeyByAccount = new Map<string, Cached<SigningKey>>();
const verificationKeyByKid = new Map<string, Cached<VerificationKey | null>>();
onAccountsInvalidated(() => {
  signingKeyByAccount.clear();
  verificationKeyByKid.clear();
});

export async function currentSigningKey(accountId: string): Promise<SigningKey> {
  const entry = signingKeyByAccount.get(accountId);
  if (fresh(entry)) return entry.value;
  const [row] = await db
    .select()
    .from(signingKeys)
    .where(and(eq(signingKeys.accountId, accountId), isNull(signingKeys.retiredAt)));
  if (!row) throw new AppError("internal", `account ${accountId} has no signing key`);
  const algorithm = row.algorithm as SigningAlgorithm;
  const value: SigningKey = {
    kid: row.kid,
    algorithm,
    privateKey: createPrivateKey({ key: openPrivateKey(row.privateJwk) as never, format: "jwk" }),
  };
  signingKeyByAccount.set(accountId, { value, at: Date.now() });
  return value;
}

/** The public key for a kid, or null when it is unknown or no longer verifies. */
export async function verificationKey(kid: string): Promise<VerificationKey | null> {
  let entry = verificationKeyByKid.get(kid);
  if (!fresh(entry)) {
    const [row] = await db.select().from(signingKeys).where(eq(signingKeys.kid, kid));
    const value: VerificationKey | null = row
      ? {
          kid,
          accountId: row.accountId,
          algorithm: row.algorithm as SigningAlgorithm,
          publicKey: (await importJWK(row.publicJwk as JWK, row.algorithm)) as CryptoKey,
          verifyUntil: row.verifyUntil,
        }
      : null;
    entry = { value, at: Date.now() };
    verificationKeyByKid.set(kid, entry);
  }
  const key = entry.value;
  if (key?.verifyUntil && key.verifyUntil.getTime() <= Date.now()) return null;
  return key;
}

/**
 * The public key, as PEM, of the still-verifying key whose kid hashes (SHA-256, hex) to
 * `kidHash`: the look-up Jitsi's ASAP key server contract makes. Null when there is none.
 */
export async function publicKeyPemByKidHash(kidHash: string): Promise<string | null> {
  const [row] = await db
    .select({ publicJwk: signingKeys.publicJwk })
    .from(signingKeys)
    .where(
      and(
        sql`encode(sha256(convert_to(${signingKeys.kid}, 'UTF8')), 'hex') = ${kidHash}`,
        or(isNull(signingKeys.verifyUntil), gt(signingKeys.verifyUntil, new Date())),
      ),
    );
  if (!row) return null;
  return createPublicKey({ key: row.publicJwk as never, format: "jwk" }).export({
    type: "spki",
    format: "pem",
  }) as string;
}

/** Every public key that still verifies, as a JWK Set. */
export async function publicKeySet(): Promise<{ keys: Record<string, unknown>[] }> {
  const rows = await db
    .select({ publicJwk: signingKeys.publicJwk })
    .from(signingKeys)
    .where(or(isNull(signingKeys.verifyUntil), gt(signingKeys.verifyUntil, new Date())))
    .orderBy(asc(signingKeys.createdAt));
  return { keys: rows.map((row) => ({ ...row.publicJwk })) };
}
