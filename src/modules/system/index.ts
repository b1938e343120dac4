/** Liveness, readiness, metrics and the public signing keys. */
import { Elysia, t } from "elysia";
import { pingDatabase } from "../../db/client";
import { renderMetrics } from "../../http/metrics";
import { pingRedis } from "../../queue/connection";
import { publicKeySet } from "../accounts/service";

/** How long a dependency may take to answer a readiness probe. */
const PROBE_TIMEOUT_MS = 2_000;

async function probe(check: () => Promise<void>): Promise<"ok" | "down"> {
  const timeout = new Promise<"down">((resolve) => setTimeout(() => resolve("down"), PROBE_TIMEOUT_MS).unref?.());
  return Promise.race([check().then(() => "ok" as const, () => "down" as const), timeout]);
}

const Readiness = t.Object({ status: t.String(), database: t.String(), redis: t.String() });

export const systemController = new Elysia({ name: "parley.system", detail: { tags: ["system"] } })
  .get("/healthz", () => ({ status: "ok" }), { response: t.Object({ status: t.String() }), detail: { summary: "The process is alive" } })
  .get(
    "/readyz",
    async ({ set }) => {
      const [database, redis] = await Promise.all([probe(pingDatabase), probe(pingRedis)]);
      const ready = database === "ok" && redis === "ok";
      if (!ready) set.status = 503;
      return { status: ready ? "ok" : "unavailable", database, redis };
    },
    { response: { 200: Readiness, 503: Readiness }, detail: { summary: "The database and Redis answer" } },
  )
  .get(
    "/metrics",
    async ({ set }) => {
      set.headers["content-type"] = "text/plain; version=0.0.4";
      return renderMetrics();
    },
    { detail: { summary: "Prometheus metrics of the whole API pool" } },
  )
  .get(
    "/.well-known/jwks.json",
    async ({ set }) => {
      set.headers["cache-control"] = "public, max-age=60";
      return publicKeySet();
    },
    {
      response: t.Object({ keys: t.Array(t.Record(t.String(), t.Unknown())) }),
      detail: { summary: "Public keys that verify Parley's tokens (JWK Set)" },
    },
  );
