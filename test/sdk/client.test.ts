/**
 * The SDK's own behaviour against a real Parley (the app on a loopback port): retries after
 * a real rate limit's Retry-After, the event stream resuming with Last-Event-ID across a cut
 * connection and waiting out a cap's 429 or 503 (a small cap on open streams) a bounded
 * number of times, and webhook verification with secrets in rotation.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { connect, createServer, type Server, type Socket } from "node:net";
import { Webhook } from "standardwebhooks";
import { overrideConfig } from "../../src/core/config";
import { setLimit } from "../../src/modules/limits/service";
import { Parley, ParleyError, type ParleyEvent, verifyWebhook } from "../../src/sdk/index";
import { app, newAccount } from "../helpers";

let server: ReturnType<typeof Bun.serve>;
let baseUrl: string;

beforeAll(() => {
  server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: (request) => app.handle(request) });
  baseUrl = `http://127.0.0.1:${server.port}`;
});

afterAll(() => server.stop(true));

const reservation = (name: string) => ({
  name,
  mail_owner: "alice@example.com",
  start_time: new Date(Date.now() + 3_600_000).toISOString(),
  duration: 30,
});

describe("retries", () => {
  test("a 429 is sent again after its Retry-After; without retries or past maxDelayMs, a ParleyError", async () => {
    const { accountId, apiKey } = await newAccount();
    await setLimit(accountId, "requests.scheduler", 1);
    const patient = new Parley({ baseUrl, apiKey });
    const started = Date.now();
    const answers = await Promise.all([1, 2, 3].map(() => patient.scheduler.listReservations()));
    expect(answers.every(Array.isArray)).toBe(true);
    // Three requests at one a second: the last waited for at least one Retry-After.
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);

    // No retries, or a Retry-After longer than the caller will wait: the 429 is the answer at once.
    for (const retry of [{ retries: 0 }, { maxDelayMs: 10 }]) {
      // An account of its own: a window of its own.
      const fresh = await newAccount();
      await setLimit(fresh.accountId, "requests.scheduler", 1);
      const impatient = new Parley({ baseUrl, apiKey: fresh.apiKey, retry });
      const outcomes = await Promise.allSettled([1, 2, 3].map(() => impatient.scheduler.listReservations()));
      const refused = outcomes
        .filter((outcome) => outcome.status === "rejected")
        .map((outcome) => (outcome as PromiseRejectedResult).reason);
      expect(refused.length).toBeGreaterThan(0);
      for (const error of refused) {
        expect(error).toBeInstanceOf(ParleyError);
        expect({ code: error.code, status: error.status }).toEqual({ code: "rate_limited", status: 429 });
      }
    }
  });
});

describe("a feature this Parley is not set up for", () => {
  test("uploads without S3 fail at once with not_configured, asked once and not retried", async () => {
    const { apiKey } = await newAccount();
    let asked = 0;
    const counting = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      fetch(request) {
        if (new URL(request.url).pathname === "/api/v1/misc/get-presigned") asked++;
        return app.handle(request);
      },
    });
    const restore = overrideConfig({ storage: { bucket: undefined } });
    try {
      const parley = new Parley({ baseUrl: `http://127.0.0.1:${counting.port}`, apiKey });
      const token = await parley.generateToken({ scope: "messaging" });
      const failure = await parley
        .with({ token })
        .uploads.presign({ fileName: "a.png", fileType: "png", fileSize: 1024 })
        .catch((error) => error);
      expect(failure).toBeInstanceOf(ParleyError);
      expect({ code: failure.code, status: failure.status }).toEqual({ code: "not_configured", status: 501 });
      expect(asked).toBe(1);
    } finally {
      restore();
      counting.stop(true);
    }
  });
});

describe("the event stream", () => {
  test("resumes with Last-Event-ID after the connection is cut, missing and repeating nothing", async () => {
    const { apiKey } = await newAccount();
    // A TCP proxy in front of Parley that can cut every connection, as a network would.
    const sockets = new Set<Socket>();
    const requests: string[] = [];
    const proxy: Server = createServer((client) => {
      const upstream = connect(server.port!, "127.0.0.1");
      sockets.add(client).add(upstream);
      client.once("data", (head) => requests.push(head.toString()));
      client.pipe(upstream).pipe(client);
      const close = () => {
        client.destroy();
        upstream.destroy();
      };
      client.on("error", close).on("close", close);
      upstream.on("error", close).on("close", close);
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    const parley = new Parley({ baseUrl, apiKey });
    const viaProxy = new Parley({ baseUrl: `http://127.0.0.1:${(proxy.address() as { port: number }).port}`, apiKey });
    try {
      await parley.scheduler.createReservation(reservation("before-0"));
      const controller = new AbortController();
      const seen: ParleyEvent[] = [];
      const reading = (async () => {
        for await (const event of viaProxy.events.stream({
          after: 0,
          types: ["reservation.created"],
          signal: controller.signal,
        })) {
          seen.push(event);
          if (seen.length === 4) return;
        }
      })();
      const deadline = Date.now() + 15_000;
      while (seen.length < 1 && Date.now() < deadline) await Bun.sleep(20);
      expect(seen.length).toBe(1);
      for (const socket of sockets) socket.destroy();
      sockets.clear();
      // Made while no stream is connected: the reconnect must fetch them.
      for (const name of ["cut-1", "cut-2", "cut-3"]) await parley.scheduler.createReservation(reservation(name));
      await Promise.race([reading, Bun.sleep(15_000)]);
      controller.abort();
      expect(seen.map((event) => (event.data as { room: string }).room)).toEqual([
        "before-0",
        "cut-1",
        "cut-2",
        "cut-3",
      ]);
      const sequences = seen.map((event) => event.sequence);
      expect(new Set(sequences).size).toBe(4);
      const reconnect = requests.find((request, index) => index > 0 && request.startsWith("GET /api/v1/events/stream"));
      expect(reconnect?.toLowerCase()).toContain(`last-event-id: ${sequences[0]}`);
    } finally {
      proxy.close();
      for (const socket of sockets) socket.destroy();
    }
  });
});

describe("the event stream refused by a cap", () => {
  /** A client whose event stream requests are timed as they are sent, and their answers' statuses kept. */
  function counted(apiKey: string, retry?: { retries: number }) {
    const attempts: number[] = [];
    const answers: number[] = [];
    const parley = new Parley({
      baseUrl,
      apiKey,
      retry,
      fetch: async (request) => {
        const stream = new URL(request.url).pathname === "/api/v1/events/stream";
        if (stream) attempts.push(Date.now());
        const response = await fetch(request);
        if (stream) answers.push(response.status);
        return response;
      },
    });
    return { parley, attempts, answers };
  }

  /** An open stream of the key, holding a slot until released. */
  async function hold(apiKey: string) {
    const holding = new AbortController();
    const holder = await fetch(`${baseUrl}/api/v1/events/stream`, {
      headers: { authorization: `Bearer ${apiKey}` },
      signal: holding.signal,
    });
    const reader = holder.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toStartWith(": parley event stream");
    // The reader is kept: a response collected as garbage would close its connection.
    return { reader, release: () => holding.abort() };
  }

  test("a 429 is waited out for its Retry-After, and the stream opens once the slot is free", async () => {
    const restore = overrideConfig({ limits: { held: { eventStreamsPerKey: 1 } } });
    const { apiKey } = await newAccount();
    const holder = await hold(apiKey);
    try {
      const { parley, attempts, answers } = counted(apiKey);
      await parley.scheduler.createReservation(reservation("after-the-cap"));
      const controller = new AbortController();
      const reading = (async () => {
        for await (const event of parley.events.stream({ after: 0, signal: controller.signal })) return event;
      })();
      // Released once the first attempt is answered, not as it is sent: on a loaded machine the holder could
      // otherwise go before the server read that attempt, which then found the slot free.
      const deadline = Date.now() + 5_000;
      while (answers.length < 1 && Date.now() < deadline) await Bun.sleep(20);
      expect(answers).toEqual([429]);
      // Refused once; the holder goes, and the stream, having waited the 5 s Parley asked, is let in.
      holder.release();
      const event = await Promise.race([reading, Bun.sleep(15_000).then(() => undefined)]);
      controller.abort();
      expect(event?.type).toBe("reservation.created");
      expect(attempts.length).toBe(2);
      expect(attempts[1]! - attempts[0]!).toBeGreaterThanOrEqual(4_900);
    } finally {
      holder.release();
      restore();
    }
  });

  test("a 503 while the process is full is waited out `retries` times, then thrown, not tried forever", async () => {
    const restore = overrideConfig({ limits: { held: { eventStreamsPerProcess: 1 } } });
    const holder = await hold((await newAccount()).apiKey);
    try {
      const { parley, attempts } = counted((await newAccount()).apiKey, { retries: 1 });
      const controller = new AbortController();
      const reading = (async () => {
        for await (const _ of parley.events.stream({ signal: controller.signal })) return "opened";
        return "ended";
      })().catch((error: unknown) => error);
      const outcome = await Promise.race([reading, Bun.sleep(12_000).then(() => "still trying")]);
      controller.abort();
      expect(outcome).toBeInstanceOf(ParleyError);
      expect({ code: (outcome as ParleyError).code, status: (outcome as ParleyError).status }).toEqual({
        code: "overloaded",
        status: 503,
      });
      // The first attempt and one retry, the Retry-After of 5 s between them.
      expect(attempts.length).toBe(2);
      expect(attempts[1]! - attempts[0]!).toBeGreaterThanOrEqual(4_900);
    } finally {
      holder.release();
      restore();
    }
  });
});

describe("verifyWebhook", () => {
  const event = {
    id: "evt_1",
    type: "room.ended",
    account_id: "acc_1",
    created_at: new Date().toISOString(),
    sequence: 1,
    data: { room: "r" },
  };
  const body = JSON.stringify(event);
  const signed = (secret: string, at = new Date()) => {
    const signature = new Webhook(secret).sign("evt_1", at, body);
    return {
      "webhook-id": "evt_1",
      "webhook-timestamp": String(Math.floor(at.getTime() / 1000)),
      "webhook-signature": signature,
    };
  };
  const secret = `whsec_${Buffer.from("a".repeat(32)).toString("base64")}`;
  const older = `whsec_${Buffer.from("b".repeat(32)).toString("base64")}`;

  test("returns the event for a good signature, from Headers or a record, with either secret of a rotation", () => {
    expect(verifyWebhook(new Headers(signed(secret)), body, secret)).toEqual(event as ParleyEvent);
    expect(verifyWebhook(signed(older), new TextEncoder().encode(body), [secret, older]).id).toBe("evt_1");
  });

  test("refuses a wrong secret, a changed body and an old timestamp with invalid_signature", () => {
    for (const attempt of [
      () => verifyWebhook(signed(older), body, secret),
      () => verifyWebhook(signed(secret), body.replace('"r"', '"s"'), secret),
      () => verifyWebhook(signed(secret, new Date(Date.now() - 3_600_000)), body, secret),
    ]) {
      expect(attempt).toThrow(ParleyError);
      try {
        attempt();
      } catch (error) {
        expect((error as ParleyError).code).toBe("invalid_signature");
      }
    }
  });
});
