/** Liveness, readiness and the public signing keys (metrics have a listener of their own: src/process/server.ts). */
import { Elysia, t } from "elysia";
import { pingDatabase } from "../../db/client";
import { pingRedis } from "../../queue/connection";
import { AppError } from "../../core/errors";
import { ErrorModel } from "../../http/errors";
import { answerOf } from "../../http/openapi";
import { publicKeyPemByKidHash, publicKeySet } from "../accounts";

/** Where Jitsi's Prosody fetches a token's public key: `asap_key_server` names this path. */
export const ASAP_KEYS_PATH = "/api/v1/jitsi/asap-keys";
const KID_HASH_FILE = /^([0-9a-f]{64})\.pem$/;

/** How long a dependency may take to answer a readiness probe. */
const PROBE_TIMEOUT_MS = 2_000;

async function probe(check: () => Promise<void>): Promise<"ok" | "down"> {
  const timeout = new Promise<"down">((resolve) => setTimeout(() => resolve("down"), PROBE_TIMEOUT_MS).unref?.());
  return Promise.race([
    check().then(
      () => "ok" as const,
      () => "down" as const,
    ),
    timeout,
  ]);
}

const Readiness = t.Object({
  status: t.String({ description: "ok; degraded (Redis down: still serving); unavailable (the database is down)" }),
  database: t.String(),
  redis: t.String(),
});

/** A public key as JWK (RFC 7517): RSA keys have n and e, Ed25519 and EC keys crv and x (and EC y). */
const Jwk = t.Object(
  {
    kty: t.String({ description: "RSA, OKP or EC" }),
    kid: t.String({ description: "The key's id: a token's header names it" }),
    alg: t.Optional(t.String({ description: "RS256, EdDSA or ES256" })),
    use: t.Optional(t.String({ description: "sig" })),
    n: t.Optional(t.String()),
    e: t.Optional(t.String()),
    crv: t.Optional(t.String()),
    x: t.Optional(t.String()),
    y: t.Optional(t.String()),
  },
  { additionalProperties: true },
);
const JwkSet = t.Object({ keys: t.Array(Jwk) });

export const systemController = new Elysia({ name: "parley.system", detail: { tags: ["system"] } })
  .get("/healthz", () => ({ status: "ok" }), {
    response: t.Object({ status: t.String() }),
    detail: { summary: "The process is alive" },
  })
  .get(
    "/readyz",
    async ({ set }) => {
      const [database, redis] = await Promise.all([probe(pingDatabase), probe(pingRedis)]);
      // Ready means this process can serve requests. Without the database almost nothing works;
      // without Redis most routes still do (docs/fault-injection.md), and a load balancer that
      // took every API process out for a Redis outage would turn it into a full one.
      if (database !== "ok") set.status = 503;
      const status = database !== "ok" ? "unavailable" : redis !== "ok" ? "degraded" : "ok";
      return { status, database, redis };
    },
    {
      response: { 200: Readiness, 503: Readiness },
      detail: { summary: "The database answers (503 if not); Redis is reported but not required" },
    },
  )
  .get(
    "/.well-known/jwks.json",
    async ({ set }) => {
      set.headers["cache-control"] = "public, max-age=60";
      // Stored as the JWK the key pair exported (src/modules/accounts/service.ts), which JwkSet describes.
      return (await publicKeySet()) as typeof JwkSet.static;
    },
    {
      response: { 200: JwkSet, 503: ErrorModel },
      detail: {
        summary: "Public keys that verify Parley's tokens (JWK Set, RFC 7517), every account's; no credential",
        security: [],
      },
    },
  )
  .get(
    `${ASAP_KEYS_PATH}/:file`,
    async ({ params, set }) => {
      const kidHash = KID_HASH_FILE.exec(params.file.toLowerCase())?.[1];
      const pem = kidHash ? await publicKeyPemByKidHash(kidHash) : null;
      if (!pem) throw new AppError("not_found", "no current Parley signing key has that kid");
      set.headers["content-type"] = "application/x-pem-file";
      set.headers["cache-control"] = "public, max-age=60";
      return pem;
    },
    {
      params: t.Object({ file: t.String({ maxLength: 80, description: "<SHA-256 of the kid, hex>.pem" }) }),
      response: { 200: t.String({ description: "The public key, PEM (SPKI)" }), 404: ErrorModel, 503: ErrorModel },
      detail: {
        responses: {
          200: answerOf("The public key, PEM (SPKI)", { "application/x-pem-file": { type: "string" } }),
        },
        summary:
          "A signing key's public key as PEM, for Jitsi's Prosody token " +
          "auth (its asap_key_server); no credential, public keys only",
        security: [],
      },
    },
  );
