/**
 * An endpoint's circuit breaker, against a receiver that fails, recovers and fails again:
 * it opens once enough attempts in its window failed, and then nothing is sent to the
 * endpoint, no attempt counted, until one probe after the cool-down; a failed probe opens it
 * again, a successful one closes it and what waited goes. Each change reaches the account's
 * other endpoints, and the event log, as a catalogue event with its reason.
 */
import { expect, test } from "bun:test";
import { eq, sql } from "drizzle-orm";
import { overrideConfig } from "../../src/core/config";
import { db } from "../../src/db/client";
import { renderMetrics } from "../../src/http/metrics";
import { rowsOf } from "../../src/db/rows";
import { recordEvent } from "../../src/modules/catalogue";
import { webhookEndpoints } from "../../src/modules/webhooks/schema";
import { startWebhooksWorker } from "../../src/modules/webhooks/worker";
import { call, newAccount } from "../helpers";
import { until } from "../support/wait";
import { startReceiver } from "../support/webhook-receiver";

test("the breaker opens on failures, holds deliveries back unattempted, probes, closes, and opens again", async () => {
  const restoreConfig = overrideConfig({
    webhooks: {
      breakerMinAttempts: 4,
      breakerFailurePercent: 50,
      breakerWindowSeconds: 60,
      breakerCooldownSeconds: 2,
      // Retries at once: only the breaker holds the deliveries back.
      retrySchedule: [1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
    },
  });
  const account = await newAccount();
  const secrets: string[] = [];
  const flaky = await startReceiver(() => secrets[0]!);
  const watcher = await startReceiver(() => secrets[1]!);
  const worker = startWebhooksWorker({ concurrency: 4, sweepIntervalMs: 200 });
  const auth = { authorization: `Bearer ${account.apiKey}` };
  try {
    const flakyEndpoint = await call("POST", "/api/v1/webhooks", {
      headers: auth,
      body: { url: flaky.url, event_types: ["reservation.deleted"] },
    });
    secrets[0] = flakyEndpoint.body.secret;
    const id = flakyEndpoint.body.endpoint.id as string;
    const watching = await call("POST", "/api/v1/webhooks", {
      headers: auth,
      body: {
        url: watcher.url,
        event_types: ["endpoint.circuit_opened", "endpoint.circuit_closed", "endpoint.disabled"],
      },
    });
    expect(watching.status).toBe(201);
    secrets[1] = watching.body.secret;
    const emit = (count: number, from: number) =>
      db.transaction(async (tx) => {
        for (let i = from; i < from + count; i++)
          await recordEvent(tx, account.accountId, "reservation.deleted", { reservation_id: i, room: `b-${i}` });
      });
    const attempts = async () =>
      Number(
        rowsOf<{ n: string }>(
          await db.execute(
            sql`select coalesce(sum(attempts), 0) as n from webhook_deliveries where endpoint_id = ${id}`,
          ),
        )[0]!.n,
      );
    const changes = () => watcher.unique().map((entry) => entry.event.type as string);
    const openUntil = async () =>
      (await db.select().from(webhookEndpoints).where(eq(webhookEndpoints.id, id)))[0]!.circuitOpenUntil;

    // Fails: six deliveries fail at once, the breaker opens, with the reason.
    flaky.setMode("error");
    await emit(6, 0);
    expect(await until(changes, (list) => list.length >= 1)).toEqual(["endpoint.circuit_opened"]);
    const opened = watcher.unique()[0]!.event;
    expect(opened.data).toMatchObject({ endpoint_id: id, url: flaky.url });
    expect(opened.data.reason).toMatch(/^\d+ of \d+ attempts failed within 60 s$/);
    expect(await openUntil()).not.toBeNull();
    const health = async () => (await call("GET", `/api/v1/webhooks/${id}`, { headers: auth })).body.health;
    const whileOpen = await health();
    expect(whileOpen).toMatchObject({ state: "circuit_open", success_rate: 0, backlog: 6 });
    // Attempted before it opened: at least the four that opened it, of the six.
    expect(whileOpen.recent).toBeGreaterThanOrEqual(4);
    // And /metrics counts it among the open breakers, with its backlog.
    const metrics = await renderMetrics();
    expect(
      Number(/^parley_webhook_endpoints\{state="circuit_open"\} (\d+)$/m.exec(metrics)?.[1]),
    ).toBeGreaterThanOrEqual(1);
    expect(Number(/^parley_webhook_backlog\{state="circuit_open"\} (\d+)$/m.exec(metrics)?.[1])).toBeGreaterThanOrEqual(
      6,
    );
    // Open: more events wait, and nothing is attempted, their retries used up by nothing, until the probe.
    const before = await attempts();
    await emit(4, 6);
    await Bun.sleep(1_000);
    expect(await attempts()).toBe(before);
    // The probe fails: one attempt, and the breaker opens again.
    expect(await until(changes, (list) => list.length >= 2)).toEqual([
      "endpoint.circuit_opened",
      "endpoint.circuit_opened",
    ]);
    expect(watcher.unique()[1]!.event.data.reason).toBe("the probe failed: 500");
    expect(await attempts()).toBe(before + 1);

    // Recovers: the next probe succeeds, the breaker closes, and all ten go.
    flaky.setMode("ok");
    expect(await until(changes, (list) => list.length >= 3)).toContain("endpoint.circuit_closed");
    expect(
      await until(
        () => flaky.unique().length,
        (n) => n === 10,
      ),
    ).toBe(10);
    expect(await openUntil()).toBeNull();
    const healthy = await until(health, (figures) => figures.backlog === 0);
    expect(healthy).toMatchObject({ state: "healthy", recent: 10, success_rate: 1, backlog: 0 });
    expect(healthy.latency_p50_ms).toBeLessThanOrEqual(healthy.latency_p99_ms);

    // Fails again: the breaker opens again.
    flaky.setMode("error");
    await emit(6, 10);
    expect(await until(changes, (list) => list.length >= 4)).toEqual([
      "endpoint.circuit_opened",
      "endpoint.circuit_opened",
      "endpoint.circuit_closed",
      "endpoint.circuit_opened",
    ]);
    // The event log has them too.
    const log = await call("GET", "/api/v1/events?types=endpoint.circuit_opened,endpoint.circuit_closed", {
      headers: auth,
    });
    expect(log.body.events.map((event: { type: string }) => event.type).sort()).toEqual([...changes()].sort());
  } finally {
    await worker.stop();
    await db.delete(webhookEndpoints).where(eq(webhookEndpoints.accountId, account.accountId));
    flaky.stop();
    watcher.stop();
    restoreConfig();
  }
}, 40_000);
