/**
 * Issues the JWTs an account hands to its end users (src/modules/auth/access-token.ts verifies them).
 */
import { randomUUID } from "node:crypto";
import { config } from "../../core/config";
import { roomKey } from "../../core/room-key";
import { AppError } from "../../core/errors";
import { type Account, currentSigningKey } from "../accounts";
import { SCOPES, type Scope, type TokenContextUser } from "../auth";
import { signJwt } from "./jwt";
import type { TokenRequest } from "./model";

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
    throw new AppError(
      "validation_failed",
      `${field}: "${value}" is not a duration such as "24 hours", "2h" or "90 minutes"`,
    );
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
  if (!(audiences.length === 1 && audiences[0] === "media"))
    throw new AppError("validation_failed", "room: only a media-scoped token names a room");
  return room === "*" ? room : roomKey(room);
}

export async function issueToken(account: Account, request: TokenRequest): Promise<string> {
  const accountId = account.id;
  const audiences = audiencesFor(request.scope);
  const mediaOnly = audiences.length === 1 && audiences[0] === "media";
  const room = roomClaim(audiences, request.room);
  const lifetime =
    request.exp === undefined || request.exp === ""
      ? config.tokens.defaultTtlSeconds
      : parseDuration("exp", String(request.exp));
  if (lifetime > config.tokens.maxTtlSeconds) {
    throw new AppError("validation_failed", `exp: at most ${config.tokens.maxTtlSeconds / 3600} hours`);
  }
  const notBefore =
    request.nbf === undefined || request.nbf === "" ? undefined : parseDuration("nbf", String(request.nbf));
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
  // Jitsi's Prosody verifies RS256 only (luajwtjitsi); a token it
  // can never accept is refused here, where the cause can be named.
  if (mediaOnly && key.algorithm !== "RS256") {
    throw new AppError(
      "validation_failed",
      "scope: media tokens are for Jitsi, which verifies RS256 only, and " +
        `this account signs with ${key.algorithm}; the operator can switch ` +
        `it with \`npm run parley -- rotate-key ${accountId} --alg RS256\``,
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
