/**
 * Authentication guards as Elysia macros. A route opts in with `{ apiKey: true }` (the
 * account's API key in Authorization, raw or after `Bearer `) or `{ bearer: "messaging" }`
 * (a Parley token whose scope allows that service).
 */
import { Elysia } from "elysia";
import { accountForApiKey } from "../modules/accounts/service";
import { type Scope, verifyAccessToken } from "../modules/token/service";
import { AppError } from "./errors";

/** The credential in an Authorization header, with any `Bearer ` prefix removed. */
export function credentialFrom(authorization: string | undefined): string | undefined {
  if (!authorization) return undefined;
  const value = authorization.replace(/^Bearer\s+/i, "").trim();
  return value === "" ? undefined : value;
}

export async function accountFromHeader(authorization: string | undefined) {
  const apiKey = credentialFrom(authorization);
  if (!apiKey) throw new AppError("unauthorized", "the Authorization header must hold the account's API key");
  return accountForApiKey(apiKey);
}

export async function tokenFromHeader(authorization: string | undefined, scope: Scope) {
  const token = /^Bearer\s+(\S+)$/i.exec(authorization ?? "")?.[1];
  if (!token) throw new AppError("unauthorized", "the Authorization header must be Bearer <token>");
  return verifyAccessToken(token, scope);
}

export const auth = new Elysia({ name: "parley.auth" }).macro({
  apiKey: {
    async resolve({ headers }) {
      return { account: await accountFromHeader(headers.authorization) };
    },
    detail: { security: [{ apiKey: [] }] },
  },
  bearer: (scope: Scope) => ({
    async resolve({ headers }) {
      return { session: await tokenFromHeader(headers.authorization, scope) };
    },
    detail: { security: [{ bearer: [] }] },
  }),
});

/**
 * The account behind a platform credential: a Bearer token whose scope covers the platform
 * (`parley`, or empty, which grants every service), the API key as Bearer, or HTTP Basic
 * with the API key as password (any username; the account id reads best) or as username
 * with an empty password, the way curl's `-u KEY:` sends it.
 */
export async function platformAccountFromHeader(authorization: string | undefined): Promise<string> {
  const basic = /^Basic\s+(\S+)$/i.exec(authorization ?? "")?.[1];
  if (basic) {
    const decoded = Buffer.from(basic, "base64").toString("utf8");
    const colon = decoded.indexOf(":");
    if (colon < 0) throw new AppError("unauthorized", "HTTP Basic credentials must be user:password, with the API key as password");
    const apiKey = decoded.slice(colon + 1) || decoded.slice(0, colon);
    if (apiKey === "") throw new AppError("unauthorized", "HTTP Basic credentials hold no API key");
    return (await accountForApiKey(apiKey)).id;
  }
  const bearer = /^Bearer\s+(\S+)$/i.exec(authorization ?? "")?.[1];
  if (!bearer) throw new AppError("unauthorized", "the Authorization header must be Bearer <token> or Basic <account id:API key>");
  // A JWT has three dot-separated parts; an API key has none.
  if (bearer.split(".").length === 3) return (await verifyAccessToken(bearer, "parley")).accountId;
  return (await accountForApiKey(bearer)).id;
}

export const platformAuth = new Elysia({ name: "parley.auth.platform" }).macro({
  platform: {
    async resolve({ headers }) {
      return { accountId: await platformAccountFromHeader(headers.authorization) };
    },
    detail: { security: [{ bearer: [] }, { basic: [] }] },
  },
});
