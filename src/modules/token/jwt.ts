/**
 * JWT signing on node:crypto. Signing is the token route's whole cost, and a direct
 * sign over a cached KeyObject is about twice as fast as going through WebCrypto.
 * Verification stays with jose, which checks every claim.
 */
import { sign } from "node:crypto";
import type { SigningKey } from "../accounts/service";

const HASH = { RS256: "sha256", ES256: "sha256", EdDSA: null } as const;

const base64url = (value: string | Buffer) => Buffer.from(value).toString("base64url");

export function signJwt(key: SigningKey, claims: Record<string, unknown>): string {
  const header = base64url(JSON.stringify({ alg: key.algorithm, kid: key.kid, typ: "JWT" }));
  const input = `${header}.${base64url(JSON.stringify(claims))}`;
  // JWS wants ECDSA signatures as raw r||s, not node's default DER.
  const signer = key.algorithm === "ES256" ? { key: key.privateKey, dsaEncoding: "ieee-p1363" as const } : key.privateKey;
  return `${input}.${sign(HASH[key.algorithm], Buffer.from(input), signer).toString("base64url")}`;
}
