/**
 * Prometheus metrics are served on METRICS_HOST:METRICS_PORT, not on the public API port,
 * on the embedded database and on PostgreSQL (where both API processes of the pool share the
 * metrics port, and a scrape counts the whole pool).
 */
import { afterAll, describe, expect, test } from "bun:test";
import { http, type Parley, startParley } from "./support/parley";
import { childPids, until } from "./support/wait";

const fresh = (url: string) => fetch(url, { keepalive: false });

for (const mode of [
  { name: "the embedded database", embedded: true, processes: "1" },
  { name: "PostgreSQL", embedded: false, processes: "2" },
]) {
  describe(`metrics on their own listener, on ${mode.name}`, () => {
    let parley: Parley | undefined;

    afterAll(async () => {
      await parley?.close();
    });

    test("the public port answers 404 for /metrics; the metrics port serves the pool's counts", async () => {
      parley = await startParley({
        embedded: mode.embedded,
        env: { SIP_ENABLED: "false", API_PROCESSES: mode.processes },
      });
      if (!mode.embedded)
        await until(
          () => childPids(parley!.process.pid, "api").length,
          (count) => count === 2,
          15_000,
        );
      const requests = 20;
      for (let i = 0; i < requests; i++) expect((await http(parley, "GET", "/readyz")).status).toBe(200);

      const hidden = await fresh(`${parley.base}/metrics`);
      expect(hidden.status).toBe(404);
      expect(await hidden.text()).not.toContain("parley_http_requests_total");

      // Each process publishes its counts every 5 s; a scrape on any of them merges them all.
      const counted = await until(
        async () => {
          const scrape = await fresh(parley!.metrics);
          const text = await scrape.text();
          return {
            status: scrape.status,
            type: scrape.headers.get("content-type"),
            text,
            count: Number(
              /parley_http_requests_total\{method="GET",route="\/readyz",status="200"\} (\d+)/.exec(text)?.[1] ?? 0,
            ),
          };
        },
        (scrape) => scrape.count >= requests,
        20_000,
        250,
      );
      expect(counted.status).toBe(200);
      expect(counted.type).toContain("text/plain; version=0.0.4");
      expect(counted.text).toMatch(/parley_queue_jobs\{queue="recorder",state="waiting"\} \d+/);
      expect((await fresh(parley.metrics.replace("/metrics", "/healthz"))).status).toBe(404);
    }, 90_000);
  });
}
