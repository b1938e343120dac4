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
