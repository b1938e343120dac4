/**
 * The token route's floor, for test/bench/token.bench.ts: Parley's app (its pipeline: request
 * id, log line, metrics, the error shape) with one more route that only signs the claims the
 * route signs, under a key made here, and reads no body, account, key or limit. One such
 * process per core on PORT (reusePort), as the API pool runs. What the token route costs beyond
 * this one is what it adds to a signature; this one against raw signing is what HTTP costs.
 */
import { createApp } from "../../../src/app";
import { benchKey, signBenchToken } from "./signing";

const key = benchKey(process.env.SIGN_ALGORITHM === "EdDSA" ? "EdDSA" : "RS256");

createApp()
  .get("/sign-only", () => ({ token: signBenchToken(key) }))
  .listen({ hostname: "127.0.0.1", port: Number(process.env.PORT), reusePort: true });
