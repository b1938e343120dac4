/**
 * What the token benchmark signs outside the route, raw in a loop and in the floor's route
 * (sign-only.ts): a key made here and a token's claims as the route writes them, through the
 * route's own signer.
 */
import { generateKeyPairSync } from "node:crypto";
import type { SigningKey } from "../../../src/modules/accounts/signing-keys";
import { signJwt } from "../../../src/modules/token/jwt";

export type BenchAlgorithm = "RS256" | "EdDSA";

/** The limits a generate-token request counts: the bench lifts them, the contract's floor writes them. */
export const TOKEN_ROUTE_LIMITS = ["requests.token", "requests.per_key", "tokens.per_key"] as const;

export function benchKey(algorithm: BenchAlgorithm): SigningKey {
  const privateKey =
    algorithm === "RS256"
      ? generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey
      : generateKeyPairSync("ed25519").privateKey;
  return { kid: "bench", algorithm, privateKey };
}

/** One token of the claims a generate-token request for user "bench" signs, issued now. */
export function signBenchToken(key: SigningKey): string {
  const now = Math.floor(Date.now() / 1000);
  return signJwt(key, {
    iss: "parley",
    sub: "acc_bench",
    aud: ["messaging", "media", "parley"],
    iat: now,
    exp: now + 86_400,
    context: { user: { id: "bench", name: "Bench", moderator: false }, group: "acc_bench" },
    room: "*",
  });
}
