/**
 * Verifies the bearer JWTs Parley issued (src/modules/token issues them). Every guard, the
 * socket and the token feature read a caller's identity through here, so verification sits
 * below the features that issue or use tokens.
 */
import { decodeProtectedHeader, errors as joseErrors, jwtVerify } from "jose";
import { config, SIGNING_ALGORITHMS, type SigningAlgorithm } from "../../core/config";
import { AppError } from "../../core/errors";
import { isStorable } from "../../http/text";
import { verificationKey } from "../accounts";

/** Scope values of a token request; `parley` is the platform scope. */
export const SCOPES = ["messaging", "media", "parley"] as const;
export type Scope = (typeof SCOPES)[number];

export interface TokenContextUser {
  id: string;
  name?: string;
  email?: string;
  avatar?: string;
  moderator: boolean;
}

export interface VerifiedToken {
  accountId: string;
  user: TokenContextUser;
  audiences: Scope[];
}

/**
 * Verifies a bearer token against the key named by its kid. Only the algorithm that key
 * was made for is accepted, which shuts out `alg: none` and HS256-with-a-public-key tricks.
 */
export async function verifyAccessToken(token: string, audience?: Scope): Promise<VerifiedToken> {
  let header: ReturnType<typeof decodeProtectedHeader>;
  try {
    header = decodeProtectedHeader(token);
  } catch {
    throw new AppError("invalid_token", "the token is not a JWT");
  }
  // The key id is looked up in the database: a forged header may hold anything, NUL included.
  if (
    typeof header.kid !== "string" ||
    !isStorable(header.kid) ||
    !(SIGNING_ALGORITHMS as readonly string[]).includes(header.alg ?? "")
  ) {
    throw new AppError("invalid_token", "the token's header names no known key or algorithm");
  }
  const key = await verificationKey(header.kid);
  if (!key || key.algorithm !== (header.alg as SigningAlgorithm)) {
    throw new AppError("invalid_token", "the token was not signed by a current Parley key");
  }
  let payload: Awaited<ReturnType<typeof jwtVerify>>["payload"];
  try {
    ({ payload } = await jwtVerify(token, key.publicKey, {
      algorithms: [key.algorithm],
      issuer: config.tokens.issuer,
    }));
  } catch (error) {
    if (error instanceof joseErrors.JWTExpired) throw new AppError("token_expired", "the token has expired");
    throw new AppError("invalid_token", "the token could not be verified");
  }
  const context = payload.context as { user?: TokenContextUser; group?: string } | undefined;
  // A media token's sub names its Jitsi domain; every other token's names the account.
  const subjectMatches = payload.aud === "media" || payload.sub === key.accountId;
  if (!subjectMatches || context?.group !== key.accountId || typeof context.user?.id !== "string") {
    throw new AppError("invalid_token", "the token's claims do not match its key");
  }
  const audiences = (Array.isArray(payload.aud) ? payload.aud : [payload.aud]).filter((aud): aud is Scope =>
    (SCOPES as readonly string[]).includes(aud ?? ""),
  );
  if (audience && !audiences.includes(audience)) {
    throw new AppError("forbidden", `the token's scope does not allow ${audience}`);
  }
  return { accountId: key.accountId, user: context.user, audiences };
}
