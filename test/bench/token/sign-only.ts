/**
 * The token route's floors, for test/bench/token.bench.ts: Parley's app (its pipeline: request
 * id, log line, metrics, the error shape) with two more routes under a key made here. GET
 * /sign-only only signs the claims the route signs, and reads no body, account, key or limit.
 * POST /sign-only does what the route's contract asks of any token route beyond a signature:
 * it reads the API key from the JSON body and answers with the RateLimit headers of the route's
 * three limits; it validates, looks up and counts nothing. POST /sign-limited does that with the
 * account looked up by the key and the route's limits counted (the headers then theirs): against
 * the contract's floor, what the limits cost. One such process per core on PORT (reusePort), as
 * the API pool runs. What the token route costs beyond these is what it adds.
 */
import { createApp } from "../../../src/process/app";
import { AppError } from "../../../src/core/errors";
import { rateLimitHeaders } from "../../../src/http/ratelimit";
import { accountForApiKey } from "../../../src/modules/accounts/service";
import { applyRequestLimit } from "../../../src/modules/limits";
import { LIMITS } from "../../../src/modules/limits/definitions";
import { buildProcess } from "../../../src/process/root";
import { benchKey, signBenchToken, TOKEN_ROUTE_LIMITS } from "./signing";

// Built as an API process is: the database, Redis and the broker the app's routes reach.
await buildProcess("api");

const key = benchKey(process.env.SIGN_ALGORITHM === "EdDSA" ? "EdDSA" : "RS256");

/** As long as the route's own: its limits' policies with the bench's lifted quotas. */
const headers = rateLimitHeaders(
  TOKEN_ROUTE_LIMITS.map((name) => ({
    name,
    quota: 1_000_000_000,
    windowSeconds: LIMITS[name].windowSeconds,
    remaining: 999_999_999,
    resetSeconds: 1,
  })),
);

/** The API key the body names: what a token route must read before anything else. */
function apiKeyOf(body: unknown): string {
  const apiKey = (body as { apiKey?: unknown } | undefined)?.apiKey;
  if (typeof apiKey !== "string") throw new AppError("unauthorized", "no apiKey in the body");
  return apiKey;
}

createApp()
  .get("/sign-only", () => ({ token: signBenchToken(key) }))
  .post("/sign-only", ({ body, set }) => {
    apiKeyOf(body);
    Object.assign(set.headers, headers);
    return { token: signBenchToken(key) };
  })
  .post("/sign-limited", async ({ body, set }) => {
    const apiKey = apiKeyOf(body);
    const account = await accountForApiKey(apiKey);
    await applyRequestLimit(set, "token", { accountId: account.id, apiKey });
    return { token: signBenchToken(key) };
  })
  .listen({ hostname: "127.0.0.1", port: Number(process.env.PORT), reusePort: true });
