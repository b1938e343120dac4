/**
 * The main flow on the embedded database: Parley started as `npm start` does with no
 * DATABASE_URL (PGlite, every role in one process, the webhooks worker among them). Conference
 * events posted to it reach a webhook receiver, each verified with `standardwebhooks`, in
 * the log, on the stream and on the socket's events topic; a receiver down for a while still
 * gets each event once.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { type Parley, startParley } from "../support/parley";
import { connect, disconnect, join, recorder } from "../support/phoenix";
import { until } from "../support/wait";
import { startReceiver } from "../support/webhook-receiver";

let parley: Parley | undefined;
let base: string;
let apiKey: string;

beforeAll(async () => {
  parley = await startParley({
    embedded: true,
    env: {
      BOOTSTRAP_ACCOUNT: "true",
      SIP_ENABLED: "false",
      LOG_LEVEL: "warn",
      WEBHOOK_SWEEP_INTERVAL_MS: "300",
      // The outage alone: an endpoint circuit breaker's events would take sequence numbers the log and stream
      // checks count on (the breaker is webhooks-breaker.test.ts's).
      WEBHOOK_BREAKER_MIN_ATTEMPTS: "1000",
    },
  });
  base = parley.base;
  apiKey = await parley.firstApiKey();
}, 70_000);

afterAll(async () => {
  await parley?.close();
});

const api = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
  fetch(`${base}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${apiKey}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
      ...headers,
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });

test("on PGlite: webhooks verified and delivered once each across an outage, the log and the stream", async () => {
  let secret = "";
  const receiver = await startReceiver(() => secret);
  try {
    const created = await api("POST", "/api/v1/webhooks", {
      url: receiver.url,
      event_types: ["room.started", "room.ended"],
    });
    expect(created.status).toBe(201);
    const endpoint = (await created.json()) as { endpoint: { id: string }; secret: string };
    secret = endpoint.secret;

    const t0 = 1_900_000_000;
    const room = (i: number) => ({ event_name: "muc-room-created", room_name: `embedded-${i}`, created_at: t0 + i });
    for (let i = 0; i < 3; i++) expect((await api("POST", "/api/v1/events/room/created", room(i))).status).toBe(200);
    await until(
      () => receiver.received.length,
      (n) => n >= 3,
    );
    // The receiver down, then failing: each phase lasts until an attempt of the three new
    // deliveries has met it (no answer, then 500), and their retries wait.
    const attemptsMet = (statusCode: number | null) =>
      until(
        async () =>
          (
            (await (await api("GET", `/api/v1/webhooks/${endpoint.endpoint.id}/deliveries`)).json()) as {
              deliveries: Array<{ status: string; status_code: number | null; attempts: number }>;
            }
          ).deliveries.filter((delivery) => delivery.status === "pending"),
        (pending) =>
          pending.length === 3 &&
          pending.every((delivery) => delivery.attempts >= 1) &&
          pending.some((delivery) => delivery.status_code === statusCode),
      );
    receiver.setMode("down");
    for (let i = 3; i < 6; i++) expect((await api("POST", "/api/v1/events/room/created", room(i))).status).toBe(200);
    expect((await attemptsMet(null)).every((delivery) => delivery.attempts >= 1 && !delivery.status_code)).toBe(true);
    receiver.setMode("error");
    expect((await attemptsMet(500)).some((delivery) => delivery.status_code === 500)).toBe(true);
    receiver.setMode("ok");
    const destroyed = {
      event_name: "muc-room-destroyed",
      room_name: "embedded-0",
      created_at: t0,
      destroyed_at: t0 + 600,
      all_occupants: [],
    };
    expect((await api("POST", "/api/v1/events/room/destroyed", destroyed)).status).toBe(200);
    // Not a type the endpoint takes: in the log, never delivered.
    const joined = {
      event_name: "muc-occupant-joined",
      room_name: "embedded-0",
      occupant: { occupant_jid: "a@b/c", joined_at: t0 + 1 },
    };
    expect((await api("POST", "/api/v1/events/occupant/joined", joined)).status).toBe(200);

    const unique = await until(
      () => receiver.unique(),
      (list) => list.length >= 7,
      20_000,
    );
    expect(unique.every((entry) => entry.verified)).toBe(true);
    expect(unique.map((entry) => entry.event.type).sort()).toEqual(
      [...Array(6).fill("room.started"), "room.ended"].sort(),
    );
    expect(unique.find((entry) => entry.event.type === "room.ended")!.event.data).toMatchObject({
      room: "embedded-0",
      minutes: 10,
    });

    const log = (await (
      await api("GET", "/api/v1/events?after=0&types=room.started,room.ended,participant.joined")
    ).json()) as { events: Array<{ sequence: number; type: string }> };
    expect(log.events.map((event) => event.sequence)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    // room.ended is written by the fold of the destroy, so it may come before or after the join stored right after it.
    expect(
      log.events
        .slice(-2)
        .map((event) => event.type)
        .sort(),
    ).toEqual(["participant.joined", "room.ended"]);

    // The stream resumes after sequence 6 with exactly 7 and 8 (the fold's usage.day_settled is filtered out).
    const stream = await api(
      "GET",
      "/api/v1/events/stream?types=room.started,room.ended,participant.joined",
      undefined,
      { "last-event-id": "6" },
    );
    expect(stream.status).toBe(200);
    const reader = stream.body!.getReader();
    let text = "";
    const deadline = Date.now() + 5_000;
    while (!/id: 8\n/.test(text) && Date.now() < deadline) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    await reader.cancel();
    expect([...text.matchAll(/^id: (\d+)$/gm)].map((match) => Number(match[1]))).toEqual([7, 8]);

    const deliveries = (await (await api("GET", `/api/v1/webhooks/${endpoint.endpoint.id}/deliveries`)).json()) as {
      deliveries: Array<{ status: string }>;
    };
    expect(deliveries.deliveries.length).toBe(7);
    expect(deliveries.deliveries.every((delivery) => delivery.status === "succeeded")).toBe(true);
  } finally {
    receiver.stop();
  }
}, 60_000);

test("on PGlite: an ordered endpoint's burst goes in sequence order behind a head that failed once", async () => {
  let secret = "";
  const receiver = await startReceiver(() => secret);
  try {
    const created = await api("POST", "/api/v1/webhooks", {
      url: receiver.url,
      event_types: ["room.started"],
      ordered: true,
    });
    expect(created.status).toBe(201);
    const endpoint = (await created.json()) as { endpoint: { id: string }; secret: string };
    secret = endpoint.secret;
    // The head's first attempt fails and is retried (5 s on): the rest wait behind it, set aside.
    receiver.setMode("error-once");
    const t0 = 1_900_001_000;
    for (let i = 0; i < 6; i++) {
      const room = { event_name: "muc-room-created", room_name: `ordered-${i}`, created_at: t0 + i };
      expect((await api("POST", "/api/v1/events/room/created", room)).status).toBe(200);
    }
    const got = await until(
      () => receiver.unique(),
      (list) => list.length >= 6,
      20_000,
    );
    expect(got.every((entry) => entry.verified)).toBe(true);
    expect(got.map((entry) => entry.event.data.room)).toEqual(Array.from({ length: 6 }, (_, i) => `ordered-${i}`));
    const log = (await (await api("GET", `/api/v1/webhooks/${endpoint.endpoint.id}/deliveries`)).json()) as {
      deliveries: Array<{ attempts: number; sequence: number }>;
    };
    // The head was tried twice, and nothing behind it went before it succeeded.
    expect(log.deliveries.sort((x, y) => x.sequence - y.sequence).map((delivery) => delivery.attempts)).toEqual([
      2, 1, 1, 1, 1, 1,
    ]);
  } finally {
    receiver.stop();
  }
}, 30_000);

test("on PGlite: an app on the socket's events topic hears its account's events as they are stored", async () => {
  const minted = await api("POST", "/api/v1/misc/generate-token", { user: { id: "app" }, scope: "" });
  expect(minted.status).toBe(200);
  const { token } = (await minted.json()) as { token: string };
  const accountId = JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString()).sub as string;
  const socket = connect(parley!.ws, token);
  try {
    const topic = socket.channel(`events:${accountId}`, { presence: false });
    const heard = recorder(topic, ["room.started"]);
    await join(topic);
    const room = { event_name: "muc-room-created", room_name: "live-on-the-socket", created_at: 1_900_002_000 };
    expect((await api("POST", "/api/v1/events/room/created", room)).status).toBe(200);
    expect(await heard.next("room.started")).toMatchObject({
      account_id: accountId,
      data: { room: "live-on-the-socket" },
    });
  } finally {
    await disconnect(socket);
  }
});

test("on PGlite: an endpoint's rate and max_in_flight hold its deliveries back, none an attempt", async () => {
  let secret = "";
  const receiver = await startReceiver(() => secret);
  try {
    const created = await api("POST", "/api/v1/webhooks", {
      url: receiver.url,
      event_types: ["room.started"],
      rate_per_second: 5,
      rate_burst: 2,
      max_in_flight: 1,
    });
    expect(created.status).toBe(201);
    const endpoint = (await created.json()) as { endpoint: { id: string }; secret: string };
    secret = endpoint.secret;
    const t0 = 1_900_002_000;
    const roomCreated = (name: string, at: number) =>
      api("POST", "/api/v1/events/room/created", { event_name: "muc-room-created", room_name: name, created_at: at });
    // One delivery first, so the connection to the receiver is open: the first send of a cold one
    // arrives late and would shorten the span measured below. Then the bucket fills again (its
    // burst of 2 in 400 ms at 5 a second).
    expect((await roomCreated("limited-warm", t0 - 1)).status).toBe(200);
    expect(
      (
        await until(
          () => receiver.unique(),
          (list) => list.length >= 1,
          20_000,
        )
      ).length,
    ).toBe(1);
    await Bun.sleep(500);
    for (let i = 0; i < 6; i++) expect((await roomCreated(`limited-${i}`, t0 + i)).status).toBe(200);
    const got = (
      await until(
        () => receiver.unique(),
        (list) => list.length >= 7,
        20_000,
      )
    ).slice(1);
    expect(got.length).toBe(6);
    // Two at once (the burst), then one each 200 ms: the last no sooner than 800 ms after the first.
    const times = got.map((entry) => entry.at);
    expect(Math.max(...times) - Math.min(...times)).toBeGreaterThanOrEqual(750);
    const log = (await (await api("GET", `/api/v1/webhooks/${endpoint.endpoint.id}/deliveries`)).json()) as {
      deliveries: Array<{ attempts: number }>;
    };
    expect(log.deliveries.map((delivery) => delivery.attempts)).toEqual([1, 1, 1, 1, 1, 1, 1]);
  } finally {
    receiver.stop();
  }
}, 30_000);
