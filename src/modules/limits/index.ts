/**
 * Limits on the HTTP routes. A route opts in with `{ limit: "<family>" }` next to its
 * credential guard: the check runs after authentication (the counters are per account and
 * per API key) and is usually answered from this process's leases of the budgets (rates.ts).
 * `{ publicLimit: true }` counts the routes without a credential per client address. Every
 * limited answer, 429 or not, carries the RateLimit-Policy and RateLimit headers.
 */
import { Elysia } from "elysia";
import { credentialFrom } from "../../http/credential";
import { errorAnswers } from "../../http/openapi";
import { rateLimitHeaders } from "../../http/ratelimit";
import type { RouteFamily } from "./definitions";
import { limitPublicRequest, limitRequest, type RequestIdentity } from "./rates";
import { LimitExceeded } from "./service";

// What other features use beside the route macros: the quotas, the caps held open, the rates.
export { LimitExceeded, limitsOf, parseLimitName, reportLimits, setLimit } from "./service";
export { HeldResource, type Release } from "./held";
export { admitChatBytes, assertChatStorage, type ChatStorage, quotaExceeded, readChatStorage } from "./quotas";
export { addressCounter, credentialCounter, limitSocketMessage } from "./rates";

type Headers = Record<string, string | number>;

/** For handlers that authenticate themselves (generate-token): count the request once its account is known. */
export async function applyRequestLimit(
  set: { headers: Headers },
  family: RouteFamily,
  who: RequestIdentity,
): Promise<void> {
  Object.assign(set.headers, rateLimitHeaders(await limitRequest(family, who)));
}

/** What the credential guards of src/modules/auth resolved, whichever the route uses. */
interface Authenticated {
  account?: { id: string };
  session?: { accountId: string };
  accountId?: string;
  headers: Record<string, string | undefined>;
}

function identityOf(context: Authenticated): RequestIdentity {
  if (context.account) return { accountId: context.account.id, apiKey: credentialFrom(context.headers.authorization) };
  const accountId = context.session?.accountId ?? context.accountId;
  if (!accountId) throw new Error("a limited route must authenticate first");
  return { accountId };
}

/**
 * Turns a LimitExceeded into its headers. Registered before the error pipeline, which
 * writes the body: this hook returns nothing, so the pipeline still answers.
 */
export const limitHeaders = new Elysia({ name: "parley.limits.headers" }).onError(
  { as: "global" },
  ({ error, set }) => {
    if (!(error instanceof LimitExceeded)) return;
    Object.assign(set.headers, rateLimitHeaders(error.policies));
    set.headers["retry-after"] = String(error.retryAfterSeconds);
  },
);

export const limits = new Elysia({ name: "parley.limits" }).macro({
  limit: (family: RouteFamily) => ({
    async beforeHandle(context) {
      await applyRequestLimit(context.set, family, identityOf(context as unknown as Authenticated));
    },
    detail: { responses: errorAnswers("429") },
  }),
  publicLimit: {
    // A getter, as the auth macros' (src/modules/auth): a fresh object for each route.
    get detail() {
      return { responses: errorAnswers("429") };
    },
    async beforeHandle({ request, server, set }) {
      // In-process calls (tests, app.handle) have no peer address to count by.
      const address = server?.requestIP(request)?.address;
      if (address) Object.assign(set.headers, rateLimitHeaders(await limitPublicRequest(address)));
    },
  },
});
