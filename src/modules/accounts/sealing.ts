/**
 * Secrets at rest: private signing keys and webhook secrets are always stored sealed with
 * AES-256-GCM, under a key derived (HKDF) from SIGNING_KEY_SECRET or, when it is unset, from a
 * random secret generated once into DATA_DIR/sealing-key (0600). A database dump, a backup, the
 * WAL or a replica then holds no usable secret. Rows an older Parley stored in plain text are
 * read as they are, and sealed by the next start (resealAtRest).
 */
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { config } from "../../core/config";
import { AppError } from "../../core/errors";
import { secretKeptIn } from "../../core/kept-secret";

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

/** The generated sealing secret's file, used when SIGNING_KEY_SECRET is unset. */
export const sealingKeyFile = () => join(config.database.dataDir, "sealing-key");

/** Where the sealing secret comes from, for messages: the setting or the file. */
export const sealingKeySource = () => (config.tokens.signingKeySecret ? "SIGNING_KEY_SECRET" : sealingKeyFile());

let derived: { secret: string; key: Buffer } | undefined;

function sealingKey(): Buffer {
  const secret = config.tokens.signingKeySecret ?? secretKeptIn(sealingKeyFile());
  if (derived?.secret !== secret) {
    derived = { secret, key: Buffer.from(hkdfSync("sha256", secret, "parley", "signing-key-sealing", 32)) };
  }
  return derived.key;
}

/** Reads the sealing secret now, generating its file on a first start; true when it was generated. */
export function prepareSealingKey(): boolean {
  const generated = !config.tokens.signingKeySecret && !existsSync(sealingKeyFile());
  sealingKey();
  return generated;
}

export const isSealed = (stored: StoredPrivateKey): stored is SealedKey => stored.sealed === "A256GCM";

export function sealPrivateKey(jwk: PrivateJwk): SealedKey {
  const iv = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", sealingKey(), iv);
  const data = Buffer.concat([cipher.update(JSON.stringify(jwk), "utf8"), cipher.final()]);
  return {
    sealed: "A256GCM",
    iv: iv.toString("base64url"),
    tag: cipher.getAuthTag().toString("base64url"),
    data: data.toString("base64url"),
  };
}

export function openPrivateKey(stored: StoredPrivateKey): PrivateJwk {
  if (!isSealed(stored)) return stored;
  const decipher = createDecipheriv("aes-256-gcm", sealingKey(), Buffer.from(stored.iv, "base64url"));
  decipher.setAuthTag(Buffer.from(stored.tag, "base64url"));
  try {
    const plain = Buffer.concat([decipher.update(Buffer.from(stored.data, "base64url")), decipher.final()]);
    return JSON.parse(plain.toString("utf8")) as PrivateJwk;
  } catch {
    throw new AppError(
      "internal",
      `a secret in the database was sealed with another key than ${sealingKeySource()}: set SIGNING_KEY_SECRET ` +
        "to the secret it was sealed with, or put back the sealing-key file it was sealed with (docs/security.md)",
    );
  }
}
