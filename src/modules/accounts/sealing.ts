/**
 * Private signing keys at rest. With SIGNING_KEY_SECRET set, a private JWK is stored sealed
 * with AES-256-GCM under a key derived from that secret, so a database dump alone cannot
 * sign tokens. Keys stored before the secret was set stay readable as they are.
 */
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from "node:crypto";
import { config } from "../../config";
import { AppError } from "../../core/errors";

// A type, not an interface, so it fits the JWK shape of the column as well.
export type SealedKey = {
  sealed: "A256GCM";
  iv: string;
  tag: string;
  data: string;
};

/** A private key as a JWK (its members vary with the algorithm). */
export type PrivateJwk = Record<string, unknown>;

export type StoredPrivateKey = PrivateJwk | SealedKey;

let derived: Buffer | undefined;

function sealingKey(secret: string): Buffer {
  derived ??= Buffer.from(hkdfSync("sha256", secret, "parley", "signing-key-sealing", 32));
  return derived;
}

export function sealPrivateKey(jwk: PrivateJwk): StoredPrivateKey {
  const secret = config.tokens.signingKeySecret;
  if (!secret) return jwk;
  const iv = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", sealingKey(secret), iv);
  const data = Buffer.concat([cipher.update(JSON.stringify(jwk), "utf8"), cipher.final()]);
  return {
    sealed: "A256GCM",
    iv: iv.toString("base64url"),
    tag: cipher.getAuthTag().toString("base64url"),
    data: data.toString("base64url"),
  };
}

export function openPrivateKey(stored: StoredPrivateKey): PrivateJwk {
  if (stored.sealed !== "A256GCM") return stored;
  const sealed = stored as SealedKey;
  const secret = config.tokens.signingKeySecret;
  if (!secret) throw new AppError("internal", "a signing key is sealed but SIGNING_KEY_SECRET is not set");
  const decipher = createDecipheriv("aes-256-gcm", sealingKey(secret), Buffer.from(sealed.iv, "base64url"));
  decipher.setAuthTag(Buffer.from(sealed.tag, "base64url"));
  const plain = Buffer.concat([decipher.update(Buffer.from(sealed.data, "base64url")), decipher.final()]);
  return JSON.parse(plain.toString("utf8")) as PrivateJwk;
}
