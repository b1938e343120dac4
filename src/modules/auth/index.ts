/**
 * Authentication guards as Elysia macros. A route opts in with `{ apiKey: true }` (the
 * account's API key in Authorization, raw or after `Bearer `) or `{ bearer: "messaging" }`
 * (a Parley token whose scope allows that service).
 *
 * A guard answers before the request is validated, so a caller without a credential learns
 * nothing of the route's schema: Elysia parses, transforms, then validates, and resolves
 * only after that, so each guard checks the credential while the body is parsed (or, with
 * no body, in transform) and resolve hands the settled result to the handler.
 */
import { Elysia } from "elysia";
import { accountForApiKey } from "../accounts";
import { type Scope, verifyAccessToken } from "./access-token";
import { AppError } from "../../core/errors";
import { credentialFrom } from "../../http/credential";
import { errorAnswers } from "../../http/openapi";

// What other features use beside the guards: verifying a Parley token, and the user it names.
export { type Scope, SCOPES, type TokenContextUser, verifyAccessToken } from "./access-token";
export { type Actor, actorFrom } from "./actor";

export async function accountFromHeader(authorization: string | undefined) {
  const apiKey = credentialFrom(authorization);
  if (!apiKey) throw new AppError("unauthorized", "the Authorization header must hold the account's API key");
  return accountForApiKey(apiKey);
}

/**
 * An onTransform hook for routes that take the account's API key: it runs before the request
 * is validated, so a caller without a valid key learns nothing about the routes' input (401 first).
 */
export const authenticateFirst = ({ headers }: { headers: Record<string, string | undefined> }) =>
  accountFromHeader(headers.authorization).then(() => undefined);

export async function tokenFromHeader(authorization: string | undefined, scope: Scope) {
  const token = /^Bearer\s+(\S+)$/i.exec(authorization ?? "")?.[1];
  if (!token) throw new AppError("unauthorized", "the Authorization header must be Bearer <token>");
  return verifyAccessToken(token, scope);
}

/**
 * The hooks of a guard: the credential checked once per request, in parse or transform
 * (whichever runs first; both run before validation), its result handed on in resolve.
 */
function guard<T>(check: (authorization: string | undefined) => Promise<T>) {
  const checked = new WeakMap<Request, Promise<T>>();
  const checkOnce = (request: Request): Promise<T> => {
    let result = checked.get(request);
    if (!result) {
      result = check(request.headers.get("authorization") ?? undefined);
      checked.set(request, result);
    }
    return result;
  };
  const early = async ({ request }: { request: Request }) => {
    await checkOnce(request);
  };
  return { parse: early, transform: early, resolved: ({ request }: { request: Request }) => checkOnce(request) };
}

const apiKeyGuard = guard(accountFromHeader);

export const auth = new Elysia({ name: "parley.auth" }).macro({
  apiKey: {
    parse: apiKeyGuard.parse,
    transform: apiKeyGuard.transform,
    async resolve(context) {
      return { account: await apiKeyGuard.resolved(context) };
    },
    // Keys are looked up in the database: without it, 503. A getter: Elysia merges a macro's
    // detail into each route by reference, so a shared object would collect other routes' answers.
    get detail() {
      return { security: [{ apiKey: [] }], responses: errorAnswers("401", "503") };
    },
  },
  bearer: (scope: Scope) => {
    const bearerGuard = guard((authorization) => tokenFromHeader(authorization, scope));
    return {
      parse: bearerGuard.parse,
      transform: bearerGuard.transform,
      async resolve(context) {
        return { session: await bearerGuard.resolved(context) };
      },
      // 403: a token whose scope does not cover the service; 503: signing keys live in the database.
      detail: { security: [{ bearer: [] }], responses: errorAnswers("401", "403", "503") },
    };
  },
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
    if (colon < 0)
      throw new AppError("unauthorized", "HTTP Basic credentials must be user:password, with the API key as password");
    const apiKey = decoded.slice(colon + 1) || decoded.slice(0, colon);
    if (apiKey === "") throw new AppError("unauthorized", "HTTP Basic credentials hold no API key");
    return (await accountForApiKey(apiKey)).id;
  }
  const bearer = /^Bearer\s+(\S+)$/i.exec(authorization ?? "")?.[1];
  if (!bearer)
    throw new AppError("unauthorized", "the Authorization header must be Bearer <token> or Basic <account id:API key>");
  // A JWT has three dot-separated parts; an API key has none.
  if (bearer.split(".").length === 3) return (await verifyAccessToken(bearer, "parley")).accountId;
  return (await accountForApiKey(bearer)).id;
}

const platformGuard = guard(platformAccountFromHeader);

export const platformAuth = new Elysia({ name: "parley.auth.platform" }).macro({
  platform: {
    parse: platformGuard.parse,
    transform: platformGuard.transform,
    async resolve(context) {
      return { accountId: await platformGuard.resolved(context) };
    },
    get detail() {
      const security: Array<Record<string, string[]>> = [{ bearer: [] }, { basic: [] }];
      return { security, responses: errorAnswers("401", "403", "503") };
    },
  },
});
