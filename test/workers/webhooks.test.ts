/**
 * Webhook delivery by the real webhooks worker to a real receiver on loopback, every
 * request checked with the `standardwebhooks` package: signatures (and that a tampered body
 * or an old timestamp fails), a receiver that is down and then failing, a worker killed -9
 * mid-delivery, 410 Gone, 24 hours of failure, ordered endpoints, the delivery log, manual
 * retry and replay.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawn } from "bun";
import { eq, sql } from "drizzle-orm";
import { Webhook } from "standardwebhooks";
import { overrideConfig } from "../../src/core/config";
import { db } from "../../src/db/client";
import { rowsOf } from "../../src/db/rows";
import { recordEvent } from "../../src/modules/catalogue";
import { webhookDeliveries, webhookEndpoints } from "../../src/modules/webhooks/schema";
import { startWebhooksWorker } from "../../src/modules/webhooks/worker";
import { call, newAccount } from "../helpers";
import { startReceiver } from "../support/webhook-receiver";
import { until } from "../support/wait";

const auth = (apiKey: string) => ({ authorization: `Bearer ${apiKey}` });

async function emit(accountId: string, room: string) {
  await db.transaction((tx) =>
    recordEvent(tx, accountId, "room.started", { room, breakout_id: "", started_at: new Date().toISOString() }),
  );
}

async function endpointFor(apiKey: string, url: string, extra: Record<string, unknown> = {}) {
  const created = await call("POST", "/api/v1/webhooks", { headers: auth(apiKey), body: { url, ...extra } });
  expect(created.status).toBe(201);
  return { id: created.body.endpoint.id as string, secret: created.body.secret as string };
}

async function deliveries(apiKey: string, endpointId: string) {
  const answer = await call("GET", `/api/v1/webhooks/${endpointId}/deliveries`, { headers: auth(apiKey) });
  if (answer.status !== 200) throw new Error(JSON.stringify(answer.body));
  return answer.body.deliveries as any[];
}

describe("with the worker in this process", () => {
  let worker: ReturnType<typeof startWebhooksWorker>;
  beforeAll(() => {
    worker = startWebhooksWorker({ concurrency: 8, sweepIntervalMs: 200 });
  });
  afterAll(async () => {
    await worker.stop();
  });

  test("every delivery verifies with standardwebhooks; a tampered body or an old timestamp does not", async () => {
    const a = await newAccount();
    let secret = "";
    const receiver = await startReceiver(() => secret);
    try {
      ({ secret } = await endpointFor(a.apiKey, receiver.url));
      await emit(a.accountId, "signed");
      const [got] = await until(
        () => receiver.received,
        (list) => list.length >= 1,
      );
      expect(got!.verified).toBe(true);
      expect(got!.id).toMatch(/^evt_/);
      expect(got!.event).toMatchObject({
        id: got!.id,
        type: "room.started",
        account_id: a.accountId,
        sequence: 1,
        data: { room: "signed" },
      });
      // The database formats the timestamp: to the millisecond, in UTC, as the API shows it.
      const [stored] = rowsOf<{ ms: number }>(
        await db.execute(
          sql`select floor(extract(epoch from created_at) * 1000)::float8 as ms from events where id = ${got!.id}`,
        ),
      );
      expect(got!.event.created_at).toBe(new Date(stored!.ms).toISOString());

      const headers = { "webhook-id": got!.id, "webhook-timestamp": String(got!.timestamp), "webhook-signature": "" };
      const webhook = new Webhook(secret);
      // Re-sign what was received to prove the check would fail for the right reason only.
      headers["webhook-signature"] = webhook.sign(got!.id, new Date(got!.timestamp * 1000), got!.body);
      expect(() => webhook.verify(got!.body, headers)).not.toThrow();
      expect(() => webhook.verify(got!.body.replace("signed", "sIgned"), headers)).toThrow();
      const old = Math.floor(Date.now() / 1000) - 3600;
      const oldHeaders = {
        ...headers,
        "webhook-timestamp": String(old),
        "webhook-signature": webhook.sign(got!.id, new Date(old * 1000), got!.body),
      };
      expect(() => webhook.verify(got!.body, oldHeaders)).toThrow();
      // Another endpoint's secret does not verify it.
      expect(() => new Webhook(`whsec_${Buffer.alloc(32, 7).toString("base64")}`).verify(got!.body, headers)).toThrow();
    } finally {
      receiver.stop();
    }
  }, 30_000);

  test("after a rotation both the new and, for 24 hours, the old secret verify", async () => {
    const a = await newAccount();
    let secret = "";
    const receiver = await startReceiver(() => secret);
    try {
      const endpoint = await endpointFor(a.apiKey, receiver.url);
      const rotated = await call("POST", `/api/v1/webhooks/${endpoint.id}/rotate-secret`, { headers: auth(a.apiKey) });
      secret = endpoint.secret;
      await emit(a.accountId, "old-secret");
      await until(
        () => receiver.received.length,
        (n) => n >= 1,
      );
      secret = rotated.body.secret;
      await emit(a.accountId, "new-secret");
      await until(
        () => receiver.received.length,
        (n) => n >= 2,
      );
      expect(receiver.received.map((entry) => [entry.event.data.room, entry.verified])).toEqual([
        ["old-secret", true],
        ["new-secret", true],
      ]);
    } finally {
      receiver.stop();
    }
  }, 30_000);

  test("a receiver refusing connections, then answering 500, gets every event once by webhook-id", async () => {
    const a = await newAccount();
    let secret = "";
    const receiver = await startReceiver(() => secret);
    // Retries alone here: the circuit breaker (webhooks-breaker.test.ts) would hold the failing phases' deliveries.
    const restoreConfig = overrideConfig({ webhooks: { breakerMinAttempts: 1_000 } });
    try {
      let endpointId: string;
      ({ secret, id: endpointId } = await endpointFor(a.apiKey, receiver.url));
      // Each phase lasts until every delivery so far has been tried in it at least once.
      const triedAll = (count: number, statusCode: number | null) =>
        until(
          () => deliveries(a.apiKey, endpointId),
          (list) =>
            list.length === count &&
            list.every((delivery) => delivery.attempts >= 1) &&
            list.some((delivery) => delivery.status_code === statusCode),
        );
      receiver.setMode("down");
      for (let i = 0; i < 10; i++) await emit(a.accountId, `down-${i}`);
      await triedAll(10, null);
      receiver.setMode("error");
      for (let i = 0; i < 10; i++) await emit(a.accountId, `error-${i}`);
      const failing = await triedAll(20, 500);
      expect(failing.every((delivery) => delivery.status === "pending" && delivery.attempts >= 1)).toBe(true);
      expect(failing.some((delivery) => delivery.status_code === 500 && delivery.response === "receiver broken")).toBe(
        true,
      );
      receiver.setMode("ok");
      for (let i = 0; i < 10; i++) await emit(a.accountId, `up-${i}`);
      const unique = await until(
        () => receiver.unique(),
        (list) => list.length >= 30,
        20_000,
      );
      expect(unique.length).toBe(30);
      expect(unique.every((entry) => entry.verified)).toBe(true);
      expect(unique.map((entry) => entry.event.sequence).sort((x, y) => x - y)).toEqual(
        Array.from({ length: 30 }, (_, i) => i + 1),
      );
      await Bun.sleep(1_000);
      expect(receiver.unique().length).toBe(30);
    } finally {
      restoreConfig();
      receiver.stop();
    }
  }, 30_000);

  test("an ordered endpoint gets its events in sequence order even while the first one is failing", async () => {
    const a = await newAccount();
    let secret = "";
    const receiver = await startReceiver(() => secret);
    try {
      let endpointId: string;
      ({ secret, id: endpointId } = await endpointFor(a.apiKey, receiver.url, { ordered: true }));
      receiver.setMode("error");
      for (let i = 0; i < 8; i++) await emit(a.accountId, `ordered-${i}`);
      // Until the first has failed and waits for its retry, the others behind it.
      await until(
        () => deliveries(a.apiKey, endpointId),
        (list) => list.length === 8 && list.some((delivery) => delivery.status_code === 500),
      );
      receiver.setMode("ok");
      const got = await until(
        () => receiver.received,
        (list) => list.length >= 8,
        20_000,
      );
      expect(got.map((entry) => entry.event.sequence)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    } finally {
      receiver.stop();
    }
  }, 30_000);

  test("410 Gone disables the endpoint with the reason; enabling it again delivers what waited", async () => {
    const a = await newAccount();
    let secret = "";
    const receiver = await startReceiver(() => secret);
    try {
      const endpoint = await endpointFor(a.apiKey, receiver.url);
      secret = endpoint.secret;
      receiver.setMode("gone");
      await emit(a.accountId, "gone-1");
      const disabled = await until(
        async () => (await call("GET", `/api/v1/webhooks/${endpoint.id}`, { headers: auth(a.apiKey) })).body,
        (body) => body.enabled === false,
      );
      expect(disabled).toMatchObject({ enabled: false, disabled_reason: "the receiver answered 410 Gone" });
      receiver.setMode("ok");
      await emit(a.accountId, "while-disabled");
      await Bun.sleep(600);
      expect(receiver.received).toEqual([]);
      const enabled = await call("PATCH", `/api/v1/webhooks/${endpoint.id}`, {
        headers: auth(a.apiKey),
        body: { enabled: true },
      });
      expect(enabled.body).toMatchObject({ enabled: true, disabled_reason: null });
      // What was pending when it was disabled resumes; what happened while disabled is there to replay.
      const first = await until(
        () => receiver.received,
        (list) => list.length >= 1,
      );
      expect(first.map((entry) => entry.event.data.room)).toEqual(["gone-1"]);
      // The disable was an event of the account too (sequence 2), with its reason, recorded just after it.
      await until(
        async () =>
          (await call("GET", "/api/v1/events?types=endpoint.disabled", { headers: auth(a.apiKey) })).body.events,
        (list) => list.length === 1,
      );
      const replayed = await call("POST", `/api/v1/webhooks/${endpoint.id}/replay`, {
        headers: auth(a.apiKey),
        body: { after: 1 },
      });
      expect(replayed).toMatchObject({ status: 202, body: { queued: 2 } });
      await until(
        () => receiver.received,
        (list) => list.length >= 3,
      );
      const [gone, ...replays] = receiver.received.map(
        (entry) => entry.event.data.room ?? `${entry.event.type}: ${entry.event.data.reason}`,
      );
      expect(gone).toBe("gone-1");
      expect(replays.sort()).toEqual(["endpoint.disabled: the receiver answered 410 Gone", "while-disabled"]);
    } finally {
      receiver.stop();
    }
  }, 30_000);

  test("an address carrying a private IPv4 one is refused again at connect time", async () => {
    const a = await newAccount();
    // Saved while private networks were allowed; the attempt is checked under the settings in force then.
    const endpoint = await endpointFor(a.apiKey, "http://[64:ff9b::7f00:1]:9/");
    const restore = overrideConfig({ webhooks: { allowPrivateNetworks: false } });
    try {
      await emit(a.accountId, "nat64");
      const [attempt] = await until(
        () => deliveries(a.apiKey, endpoint.id),
        (list) => list.length > 0 && list[0].attempts > 0,
      );
      expect(attempt.response).toStartWith("refused: url: 64:ff9b::7f00:1 resolves to 64:ff9b::7f00:1, which carries");
    } finally {
      restore();
    }
  }, 30_000);

  test("an endpoint failing for 24 hours straight is disabled with a reason", async () => {
    const a = await newAccount();
    const receiver = await startReceiver(() => "");
    try {
      const endpoint = await endpointFor(a.apiKey, receiver.url);
      receiver.setMode("error");
      await db
        .update(webhookEndpoints)
        .set({ failingSince: sql`now() - interval '25 hours'` })
        .where(eq(webhookEndpoints.id, endpoint.id));
      await emit(a.accountId, "last-straw");
      const disabled = await until(
        async () => (await call("GET", `/api/v1/webhooks/${endpoint.id}`, { headers: auth(a.apiKey) })).body,
        (body) => body.enabled === false,
      );
      expect(disabled.disabled_reason).toStartWith("every attempt failed since ");
    } finally {
      receiver.stop();
    }
  }, 30_000);

  test("the delivery log, manual retry and replay since a time", async () => {
    const a = await newAccount();
    let secret = "";
    const receiver = await startReceiver(() => secret);
    try {
      const endpoint = await endpointFor(a.apiKey, receiver.url, { event_types: ["room.started"] });
      secret = endpoint.secret;
      const before = new Date();
      await emit(a.accountId, "logged");
      await db.transaction((tx) =>
        recordEvent(tx, a.accountId, "reservation.deleted", { reservation_id: 1, room: "not-wanted" }),
      );
      await until(
        () => receiver.received.length,
        (n) => n >= 1,
      );
      const [logged] = await until(
        () => deliveries(a.apiKey, endpoint.id),
        (list) => list[0]?.status === "succeeded",
      );
      expect(logged).toMatchObject({
        event_type: "room.started",
        sequence: 1,
        status: "succeeded",
        attempts: 1,
        status_code: 200,
        response: "thanks",
        next_attempt_at: null,
      });
      expect(logged.latency_ms).toBeGreaterThanOrEqual(0);
      expect((await deliveries(a.apiKey, endpoint.id)).length).toBe(1);

      const retried = await call("POST", `/api/v1/webhooks/${endpoint.id}/deliveries/${logged.id}/retry`, {
        headers: auth(a.apiKey),
      });
      expect(retried.status).toBe(202);
      await until(
        () => receiver.received.length,
        (n) => n >= 2,
      );
      const replayed = await call("POST", `/api/v1/webhooks/${endpoint.id}/replay`, {
        headers: auth(a.apiKey),
        body: { since: before.toISOString() },
      });
      expect(replayed.body).toEqual({ queued: 1 });
      await until(
        () => receiver.received.length,
        (n) => n >= 3,
      );
      // The same message each time: a receiver that de-duplicates by webhook-id keeps one.
      expect(new Set(receiver.received.map((entry) => entry.id)).size).toBe(1);
      expect(receiver.received.every((entry) => entry.verified)).toBe(true);
      const missing = await call("POST", `/api/v1/webhooks/${endpoint.id}/deliveries/999999999/retry`, {
        headers: auth(a.apiKey),
      });
      expect(missing.status).toBe(404);
    } finally {
      receiver.stop();
    }
  }, 30_000);

  test("an answer is logged as it came, quotes, braces and backslashes too; a NUL byte is replaced", async () => {
    const a = await newAccount();
    // Failing first, then answering: the failure and the success are recorded by different statements.
    let failing = true;
    const answer = 'got {it}, "thanks"\\ \0end';
    const receiver = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      fetch: () => new Response(answer, { status: failing ? 500 : 200 }),
    });
    const restoreConfig = overrideConfig({ webhooks: { retrySchedule: Array(100).fill(0.2) } });
    try {
      const endpoint = await endpointFor(a.apiKey, `http://127.0.0.1:${receiver.port}/hook`);
      await emit(a.accountId, "answered");
      const [failed] = await until(
        () => deliveries(a.apiKey, endpoint.id),
        (list) => list[0]?.attempts >= 1 && list[0]?.status_code !== null,
      );
      expect(failed).toMatchObject({ status_code: 500, response: 'got {it}, "thanks"\\ \uFFFDend' });
      failing = false;
      const [logged] = await until(
        () => deliveries(a.apiKey, endpoint.id),
        (list) => list[0]?.status === "succeeded",
      );
      expect(logged).toMatchObject({ status_code: 200, response: 'got {it}, "thanks"\\ \uFFFDend' });
    } finally {
      restoreConfig();
      receiver.stop(true);
    }
  }, 30_000);

  test("a retry or replay of a delivery waiting out its backoff goes now, not when the backoff ends", async () => {
    const a = await newAccount();
    let secret = "";
    const receiver = await startReceiver(() => secret);
    // Ten minutes between attempts: only the retry asked for can send it within the test.
    const restoreConfig = overrideConfig({ webhooks: { retrySchedule: [600] } });
    try {
      const endpoint = await endpointFor(a.apiKey, receiver.url);
      secret = endpoint.secret;
      receiver.setMode("error");
      await emit(a.accountId, "backed-off");
      const [waiting] = await until(
        () => deliveries(a.apiKey, endpoint.id),
        (list) => list[0]?.status_code === 500,
      );
      expect(waiting).toMatchObject({ status: "pending", attempts: 1 });
      receiver.setMode("ok");
      expect(
        (
          await call("POST", `/api/v1/webhooks/${endpoint.id}/deliveries/${waiting.id}/retry`, {
            headers: auth(a.apiKey),
          })
        ).status,
      ).toBe(202);
      await until(
        () => deliveries(a.apiKey, endpoint.id),
        (list) => list[0]?.status === "succeeded",
        5_000,
      );

      receiver.setMode("error");
      await emit(a.accountId, "backed-off-again");
      await until(
        () => deliveries(a.apiKey, endpoint.id),
        (list) => list[0]?.status_code === 500 && list[0]?.sequence === 2,
      );
      receiver.setMode("ok");
      const replayed = await call("POST", `/api/v1/webhooks/${endpoint.id}/replay`, {
        headers: auth(a.apiKey),
        body: { after: 1 },
      });
      expect(replayed.body).toEqual({ queued: 1 });
      await until(
        () => deliveries(a.apiKey, endpoint.id),
        (list) => list[0]?.status === "succeeded",
        5_000,
      );
      expect(receiver.received.map((entry) => [entry.event.data.room, entry.verified])).toEqual([
        ["backed-off", true],
        ["backed-off-again", true],
      ]);
    } finally {
      restoreConfig();
      receiver.stop();
    }
  }, 30_000);
});

test("a worker killed -9 mid-delivery and restarted loses nothing", async () => {
  const a = await newAccount();
  let secret = "";
  const receiver = await startReceiver(() => secret);
  const env = { ...process.env, WEBHOOK_TIMEOUT_MS: "1500" };
  const startChild = async () => {
    const child = spawn([process.execPath, "test/support/webhooks-worker-process.ts"], {
      stdout: "pipe",
      stderr: "inherit",
      env,
    });
    const reader = child.stdout.getReader();
    const { value } = await reader.read();
    expect(new TextDecoder().decode(value)).toContain("ready");
    return child;
  };
  let child = await startChild();
  try {
    const endpoint = await endpointFor(a.apiKey, receiver.url);
    secret = endpoint.secret;
    receiver.setMode("hang");
    for (let i = 0; i < 10; i++) await emit(a.accountId, `killed-${i}`);
    // Wait until attempts are in flight (leased), then kill the worker outright.
    await until(
      async () =>
        (await db.select().from(webhookDeliveries).where(eq(webhookDeliveries.accountId, a.accountId))).filter(
          (row) => row.leasedUntil !== null,
        ).length,
      (n) => n >= 1,
    );
    child.kill("SIGKILL");
    await child.exited;
    receiver.setMode("ok");
    for (let i = 0; i < 5; i++) await emit(a.accountId, `after-${i}`);
    child = await startChild();
    const unique = await until(
      () => receiver.unique(),
      (list) => list.length >= 15,
      30_000,
    );
    expect(unique.length).toBe(15);
    expect(unique.every((entry) => entry.verified)).toBe(true);
    expect(unique.map((entry) => entry.event.sequence).sort((x, y) => x - y)).toEqual(
      Array.from({ length: 15 }, (_, i) => i + 1),
    );
  } finally {
    child.kill("SIGKILL");
    await child.exited;
    receiver.stop();
  }
}, 60_000);
