/**
 * Issues and verifies the JWTs an account hands to its end users.
 */
import { randomUUID } from "node:crypto";
import { decodeProtectedHeader, errors as joseErrors, jwtVerify } from "jose";
import { config, SIGNING_ALGORITHMS, type SigningAlgorithm } from "../../config";
import { roomKey } from "../../core/room-key";
import { AppError } from "../../core/errors";
import { isStorable } from "../../http/text";
import { type Account, currentSigningKey, verificationKey } from "../accounts/service";
import { signJwt } from "./jwt";

/** Scope values of a token request; `parley` is the platform scope. */
export const SCOPES = ["messaging", "media", "parley"] as const;
export type Scope = (typeof SCOPES)[number];

export interface TokenUser {
  id?: string;
  name?: string;
  email?: string;
  avatar?: string;
  moderator?: boolean;
}

export interface TokenRequest {
  user?: TokenUser;
  exp?: string;
  nbf?: string;
  scope?: string;
  /** The one conference room a media token admits to; any room when absent. */
  room?: string;
}

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

const UNIT_SECONDS: Record<string, number> = {
  s: 1,
  sec: 1,
  secs: 1,
  second: 1,
  seconds: 1,
  m: 60,
  min: 60,
  mins: 60,
  minute: 60,
  minutes: 60,
  h: 3600,
  hr: 3600,
  hrs: 3600,
  hour: 3600,
  hours: 3600,
  d: 86_400,
  day: 86_400,
  days: 86_400,
  w: 604_800,
  week: 604_800,
  weeks: 604_800,
};

/**
 * Reads a duration text such as "24 hours", "2h", "90 minutes", "1 day" or a bare number,
 * which means hours. Returns seconds, or throws a 422 naming the field.
 */
export function parseDuration(field: string, value: string): number {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(value);
  const unit = match?.[2]?.toLowerCase() ?? "";
  const perUnit = unit === "" ? 3600 : UNIT_SECONDS[unit];
  if (!match || perUnit === undefined) {
    throw new AppError("validation_failed", `${field}: "${value}" is not a duration such as "24 hours", "2h" or "90 minutes"`);
  }
  const seconds = Math.round(Number(match[1]) * perUnit);
  if (seconds <= 0) throw new AppError("validation_failed", `${field}: the duration must be more than zero`);
  return seconds;
}

/** The audiences a scope grants; an empty scope grants every service. */
export function audiencesFor(scope: string | undefined): Scope[] {
  if (scope === undefined || scope === "") return [...SCOPES];
  if (!(SCOPES as readonly string[]).includes(scope)) {
    throw new AppError("validation_failed", `scope: must be one of ${SCOPES.join(", ")} or empty, got "${scope}"`);
  }
  return [scope as Scope];
}

/** An id for a user the request did not name: unique, and shaped like the ids apps use. */
function generatedUserId(): string {
  return `usr_${randomUUID().replaceAll("-", "").slice(0, 20)}`;
}

/**
 * The `room` claim of a media token: the room as Jitsi's Prosody names it (the JID node,
 * which it compares lower-cased with the claim), or `*` for any room.
 */
function roomClaim(audiences: Scope[], room: string | undefined): string | undefined {
  if (room === undefined || room === "") return audiences.includes("media") ? "*" : undefined;
  if (!(audiences.length === 1 && audiences[0] === "media")) throw new AppError("validation_failed", "room: only a media-scoped token names a room");
  return room === "*" ? room : roomKey(room);
}

export async function issueToken(account: Account, request: TokenRequest): Promise<string> {
  const accountId = account.id;
  const audiences = audiencesFor(request.scope);
  const mediaOnly = audiences.length === 1 && audiences[0] === "media";
  const room = roomClaim(audiences, request.room);
  const lifetime = request.exp === undefined || request.exp === "" ? config.tokens.defaultTtlSeconds : parseDuration("exp", request.exp);
  if (lifetime > config.tokens.maxTtlSeconds) {
    throw new AppError("validation_failed", `exp: at most ${config.tokens.maxTtlSeconds / 3600} hours`);
  }
  const notBefore = request.nbf === undefined || request.nbf === "" ? undefined : parseDuration("nbf", request.nbf);
  if (notBefore !== undefined && notBefore >= lifetime) {
    throw new AppError("validation_failed", "nbf: must come before exp");
  }
  const now = Math.floor(Date.now() / 1000);
  const user = request.user ?? {};
  const contextUser: TokenContextUser = {
    id: user.id && user.id !== "" ? user.id : generatedUserId(),
    ...(user.name !== undefined && { name: user.name }),
    ...(user.email !== undefined && { email: user.email }),
    ...(user.avatar !== undefined && { avatar: user.avatar }),
    moderator: user.moderator ?? false,
  };
  const key = await currentSigningKey(accountId);
  // Jitsi's Prosody verifies RS256 only (luajwtjitsi); a token it can never accept is refused here, where the cause can be named.
  if (mediaOnly && key.algorithm !== "RS256") {
    throw new AppError(
      "validation_failed",
      `scope: media tokens are for Jitsi, which verifies RS256 only, and this account signs with ${key.algorithm}; the operator can switch it with \`bun run admin rotate-key ${accountId} --alg RS256\``,
    );
  }
  return signJwt(key, {
    iss: config.tokens.issuer,
    // Jitsi reads sub as the domain (or tenant) the token is for; the account stays in context.group.
    sub: mediaOnly ? account.jitsiDomain : accountId,
    aud: audiences.length === 1 ? audiences[0]! : audiences,
    iat: now,
    ...(notBefore !== undefined && { nbf: now + notBefore }),
    exp: now + lifetime,
    context: { user: contextUser, group: accountId },
    // Jitsi's token verifier requires a room claim; "*" lets the holder join any room.
    ...(room !== undefined && { room }),
  });
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
  if (typeof header.kid !== "string" || !isStorable(header.kid) || !(SIGNING_ALGORITHMS as readonly string[]).includes(header.alg ?? "")) {
    throw new AppError("invalid_token", "the token's header names no known key or algorithm");
  }
  const key = await verificationKey(header.kid);
  if (!key || key.algorithm !== (header.alg as SigningAlgorithm)) {
    throw new AppError("invalid_token", "the token was not signed by a current Parley key");
  }
  let payload: Awaited<ReturnType<typeof jwtVerify>>["payload"];
  try {
    ({ payload } = await jwtVerify(token, key.publicKey, { algorithms: [key.algorithm], issuer: config.tokens.issuer }));
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
