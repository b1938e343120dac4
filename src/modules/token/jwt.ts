/**
 * JWT signing on node:crypto. Signing is the token route's whole cost, and a direct
 * sign over a cached KeyObject is about twice as fast as going through WebCrypto.
 * Verification stays with jose, which checks every claim.
 */
import { type KeyObject, type SignKeyObjectInput, sign } from "node:crypto";
import type { SigningKey } from "../accounts";

const HASH = { RS256: "sha256", ES256: "sha256", EdDSA: null } as const;

const base64url = (value: string | Buffer) => Buffer.from(value).toString("base64url");

/** What a key signs with, made once per key: the encoded header and the signer. */
interface Prepared {
  header: string;
  signer: KeyObject | SignKeyObjectInput;
}

const prepared = new WeakMap<SigningKey, Prepared>();

function prepare(key: SigningKey): Prepared {
  let made = prepared.get(key);
  if (!made) {
    made = {
      header: base64url(JSON.stringify({ alg: key.algorithm, kid: key.kid, typ: "JWT" })),
      // JWS wants ECDSA signatures as raw r||s, not node's default DER.
      signer: key.algorithm === "ES256" ? { key: key.privateKey, dsaEncoding: "ieee-p1363" } : key.privateKey,
    };
    prepared.set(key, made);
  }
  return made;
}

export function signJwt(key: SigningKey, claims: Record<string, unknown>): string {
  const { header, signer } = prepare(key);
  const input = `${header}.${base64url(JSON.stringify(claims))}`;
  return `${input}.${sign(HASH[key.algorithm], Buffer.from(input), signer).toString("base64url")}`;
}
