/**
 * The caps on what a client may hold open (docs/limits.md#caps), flooded against one real
 * API process started with small caps: LL-HLS requests waiting for a part (per address, not
 * per `viewer=`; per stream; per process), event streams (per API key, per account, per
 * process), Phoenix sockets (per token, per user, per account, per process), topics per socket
 * startRecording/stopRecording requests waiting for the recorder (per account, per process)
 * and the console's live feeds (per console session, per process). Beyond
 * each cap the answer is a fast 429 or 503 with Retry-After in the error shape, /healthz
 * answers in under 100 ms meanwhile (or within 3 × its quiet time on a busy machine), and
 * closing the held connections, abruptly too, brings the process's count in /metrics back to 0.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type IncomingMessage, request } from "node:http";
import { connect as tcpConnect } from "node:net";
import { inArray } from "drizzle-orm";
import { db } from "../../src/db/client";
import { createApiKey } from "../../src/modules/accounts/service";
import { setLimit } from "../../src/modules/limits/service";
import { streams } from "../../src/modules/streaming/schema";
import { llhlsKeys } from "../../src/modules/streaming/llhls/publisher";
import type { RenditionWindow } from "../../src/modules/streaming/llhls/window";
import { closeClient, createRedis, redisKey } from "../../src/queue/connection";
import { newAccount, tokenFor } from "../helpers";
import { type ApiProcess, startApiProcess } from "../support/api-process";
import { connect, disconnect, join } from "../support/phoenix";
import { freePort } from "../support/ports";
import { until } from "../support/wait";

const CAPS = {
  LIMIT_LLHLS_WAITS_PER_ADDRESS: "6",
  LIMIT_LLHLS_WAITS_PER_STREAM: "4",
  LIMIT_LLHLS_WAITS_PER_PROCESS: "10",
  LIMIT_EVENT_STREAMS_PER_KEY: "3",
  LIMIT_EVENT_STREAMS_PER_ACCOUNT: "5",
  LIMIT_EVENT_STREAMS_PER_PROCESS: "8",
  LIMIT_SOCKETS_PER_TOKEN: "3",
  LIMIT_SOCKETS_PER_USER: "5",
  LIMIT_SOCKETS_PER_ACCOUNT: "7",
  LIMIT_SOCKETS_PER_PROCESS: "8",
  LIMIT_TOPICS_PER_SOCKET: "4",
  LIMIT_STREAMING_WAITS_PER_ACCOUNT: "3",
  LIMIT_STREAMING_WAITS_PER_PROCESS: "5",
  LIMIT_CONSOLE_FEEDS_PER_SESSION: "3",
  LIMIT_CONSOLE_FEEDS_PER_PROCESS: "5",
};
/** Refused requests sent once a cap is reached: each must be answered at once. */
const FLOOD = 40;
/** "At once": far below the 30 s a held LL-HLS request waits here, with room for a loaded machine. */
const FAST_MS = 1_000;

let api: ApiProcess;
let metricsPort: number;
const redis = createRedis("held-caps-test");

beforeAll(async () => {
  metricsPort = await freePort();
  api = await startApiProcess({ ...CAPS, METRICS_PORT: String(metricsPort), API_PROCESSES: "1" });
});
afterAll(async () => {
  api.child.kill("SIGTERM");
  await api.child.exited;
  await closeClient(redis);
});

/** A series of the API process's /metrics: `name{resource, pid, and the labels given}`. */
async function metric(name: string, resource: string, more = ""): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const series = `${name}{resource="${resource}",pid="${api.child.pid}"${more}} `;
  const line = text.split("\n").find((candidate) => candidate.startsWith(series));
  if (!line) throw new Error(`no ${series}in /metrics`);
  return Number(line.slice(series.length));
}

/** What the API process holds of a resource now. */
const held = (resource: string) => metric("parley_held", resource);

/** Waits (bounded) until the API process holds `count` of a resource; fails if it never does. */
async function expectHeld(resource: string, count: number): Promise<void> {
  expect(
    await until(
      () => held(resource),
      (now) => now === count,
    ),
  ).toBe(count);
}

/** Probes of /healthz taken while a flood is in flight, and as many before it. */
const PROBES = 7;
/**
 * /healthz must answer in under 100 ms during a flood, judged by the median probe so that one
 * probe the scheduler delayed does not decide it. On a machine another suite keeps busy a quiet
 * probe can take longer than that, so the bound is also allowed 3 × the median of the probes
 * taken just before the flood: what is checked is that the flood itself does not slow the
 * process, which a process holding what it refused (or spinning on it) would.
 */
const HEALTHY_MS = 100;

/** The median of PROBES probes of /healthz in ms, each timed by curl on its own clock. */
async function probeHealth(): Promise<number> {
  const times: number[] = [];
  while (times.length < PROBES) {
    const curl = Bun.spawn([
      "curl",
      "-s",
      "-o",
      "/dev/null",
      "-w",
      "%{http_code} %{time_total}",
      `${api.http}/healthz`,
    ]);
    const [status, seconds] = (await new Response(curl.stdout).text()).split(" ");
    expect(status).toBe("200");
    times.push(Number(seconds) * 1000);
  }
  return times.sort((a, b) => a - b)[Math.floor(PROBES / 2)]!;
}

/**
 * Sends `one` in rounds of FLOOD at once until PROBES probes of /healthz, each taken while a
 * round is in flight, have been answered, and checks their median against HEALTHY_MS (see
 * there); the answers of every round. curl times each probe, so the flood's client work here is
 * not counted.
 */
async function floodWhileProbing<T>(one: () => Promise<T>): Promise<{ answers: T[] }> {
  const quiet = await probeHealth();
  const answers: T[] = [];
  let probing = true;
  const flooding = (async () => {
    do answers.push(...(await Promise.all(Array.from({ length: FLOOD }, one))));
    while (probing);
  })();
  const flooded = await probeHealth();
  probing = false;
  await flooding;
  expect(flooded).toBeLessThan(Math.max(HEALTHY_MS, 3 * quiet));
  return { answers };
}

interface Refusal {
  status: number;
  retryAfter: string | null;
  /** RateLimit-Policy, which the Elysia routes add to a caller's 429. */
  policy?: string | null;
  code: string;
  ms: number;
}

/** Expects every answer refused with `status` and `code`, at once, with Retry-After. */
function expectRefused(answers: Refusal[], status: number, code: string): void {
  for (const answer of answers) {
    expect(answer).toMatchObject({ status, code });
    expect(Number(answer.retryAfter)).toBeGreaterThan(0);
    expect(answer.ms).toBeLessThan(FAST_MS);
  }
}

async function refusalOf(response: Response, started: number): Promise<Refusal> {
  const body = (await response.json().catch(() => ({}))) as { error?: { code?: string } };
  return {
    status: response.status,
    retryAfter: response.headers.get("retry-after"),
    policy: response.headers.get("ratelimit-policy"),
    code: body.error?.code ?? "",
    ms: performance.now() - started,
  };
}

describe("LL-HLS requests waiting for a part", () => {
  /** Target duration of the streams here: a blocking reload waits up to three of them, 30 s. */
  const TARGET_SECONDS = 10;

  async function liveStream(stream: string, nextPart = 2): Promise<void> {
    const window: RenditionWindow = {
      partTarget: 0.33334,
      targetDuration: TARGET_SECONDS,
      ended: false,
      next: { msn: 3, part: nextPart },
      segments: [1, 2, 3].map((msn) => ({
        msn,
        programDateTime: Date.UTC(2026, 0, 1) + msn * 2000,
        duration: msn === 3 ? nextPart / 3 : 2,
        parts: Array.from({ length: msn === 3 ? nextPart : 6 }, () => ({ duration: 0.33333, independent: true })),
        complete: msn !== 3,
      })),
    };
    await redis.set(llhlsKeys.renditions(stream), JSON.stringify([{ name: "v0", bandwidth: 128_000 }]), "EX", 120);
    await redis.set(llhlsKeys.window(stream, "v0"), JSON.stringify(window), "EX", 120);
  }

  /** A blocking reload for the part not yet written, from a loopback address we pick, with a fresh viewer id. */
  function reload(stream: string, from: string) {
    const viewer = crypto.randomUUID().replaceAll("-", "").slice(0, 16);
    const started = performance.now();
    let sent!: ReturnType<typeof request>;
    const answered = new Promise<Refusal>((resolve, reject) => {
      sent = request(
        {
          host: "127.0.0.1",
          port: new URL(api.http).port,
          path: `/llhls/v1/live/${stream}/v0/index.m3u8?_HLS_msn=3&_HLS_part=2&viewer=${viewer}`,
          localAddress: from,
          agent: false,
        },
        (response: IncomingMessage) => {
          let body = "";
          response.on("data", (chunk) => (body += chunk));
          response.on("end", () => {
            let code = "";
            try {
              code = JSON.parse(body).error.code;
            } catch {}
            const retryAfter = response.headers["retry-after"];
            resolve({
              status: response.statusCode!,
              retryAfter: typeof retryAfter === "string" ? retryAfter : null,
              code,
              ms: performance.now() - started,
            });
          });
        },
      );
      sent.on("error", reject);
      sent.end();
    });
    // Destroyed requests reject; only the ones the test still awaits matter.
    answered.catch(() => {});
    return { answered, abort: () => sent.destroy() };
  }

  test("per address (any viewer id), per stream, per process: 429 or 503 at once, freed on close", async () => {
    const suffix = crypto.randomUUID().slice(0, 8);
    const [a, b, c, d] = ["a", "b", "c", "d"].map((name) => `caps-${name}-${suffix}`) as [string, ...string[]];
    for (const stream of [a, b, c, d]) await liveStream(stream!);
    // The origin learns of each stream on its first request.
    for (const stream of [a, b, c, d])
      expect((await fetch(`${api.http}/llhls/v1/live/${stream}/v0/index.m3u8`)).status).toBe(200);

    // One address, a new viewer id on every request, as the flood that found this did.
    const holding = [
      ...Array.from({ length: 4 }, () => reload(a, "127.0.0.2")),
      ...Array.from({ length: 2 }, () => reload(b!, "127.0.0.2")),
    ];
    await expectHeld("llhls_waits", 6);
    // Past the address's cap, on any stream: 429.
    const byAddress = await Promise.all(Array.from({ length: FLOOD }, () => reload(c!, "127.0.0.2").answered));
    expectRefused(byAddress, 429, "quota_exceeded");
    // Past the stream's cap, from another address: 503, since that address holds nothing.
    const byStream = await Promise.all(Array.from({ length: FLOOD }, () => reload(a, "127.0.0.3").answered));
    expectRefused(byStream, 503, "overloaded");

    holding.push(...Array.from({ length: 4 }, () => reload(c!, "127.0.0.3")));
    await expectHeld("llhls_waits", 10);
    // The process is full: a third address, a fourth stream, is refused too, and the process stays healthy.
    const { answers: byProcess } = await floodWhileProbing(() => reload(d!, "127.0.0.4").answered);
    expectRefused(byProcess, 503, "overloaded");
    expect(await metric("parley_held_cap", "llhls_waits", ',per="process"')).toBe(10);
    expect(await metric("parley_held_cap", "llhls_waits", ',per="address"')).toBe(6);
    for (const [cap, refused] of [
      ["address", byAddress.length],
      ["stream", byStream.length],
      ["process", byProcess.length],
    ] as const)
      expect(await metric("parley_held_refused_total", "llhls_waits", `,cap="llhls.waits.per_${cap}"`)).toBe(refused);

    // Half go away abruptly, the rest are answered by their part: nothing stays held.
    for (const each of holding.slice(0, 5)) each.abort();
    await expectHeld("llhls_waits", 5);
    for (const stream of [a, b!, c!]) {
      await liveStream(stream, 3);
      await redis.publish(redisKey(llhlsKeys.doorbell(stream)), "v0 w");
    }
    for (const each of holding.slice(5)) expect((await each.answered).status).toBe(200);
    await expectHeld("llhls_waits", 0);
    // And the slots are there again.
    const again = reload(d!, "127.0.0.2");
    await expectHeld("llhls_waits", 1);
    again.abort();
    await expectHeld("llhls_waits", 0);
  });
});

describe("event streams", () => {
  /** An open stream, read as a client reads it, or the refusal of one. */
  async function open(apiKey: string) {
    const abort = new AbortController();
    const started = performance.now();
    const response = await fetch(`${api.http}/api/v1/events/stream`, {
      headers: { authorization: `Bearer ${apiKey}`, accept: "text/event-stream" },
      signal: abort.signal,
    });
    if (response.status !== 200) return { refusal: await refusalOf(response, started), close: () => {} };
    const reader = response.body!.getReader();
    // The stream's first line: it is open and being served.
    expect(new TextDecoder().decode((await reader.read()).value)).toStartWith(": parley event stream");
    return { refusal: undefined, close: () => abort.abort() };
  }

  /** An event stream opened on a bare TCP connection, which the test can drop without a goodbye. */
  async function openRaw(apiKey: string) {
    const port = Number(new URL(api.http).port);
    const socket = tcpConnect(port, "127.0.0.1");
    const head = new Promise<string>((resolve) => socket.once("data", (chunk) => resolve(String(chunk))));
    socket.write(
      `GET /api/v1/events/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${apiKey}\r\n` +
        "Accept: text/event-stream\r\n\r\n",
    );
    expect(await head).toStartWith("HTTP/1.1 200");
    return socket;
  }

  test("per API key, per account and per process: 429 or 503 at once, freed on close, abrupt too", async () => {
    const first = await newAccount();
    const secondKey = (await createApiKey(first.accountId, "second")).apiKey;
    const thirdKey = (await createApiKey(first.accountId, "third")).apiKey;
    const other = await newAccount();

    const streams = await Promise.all(Array.from({ length: 3 }, () => open(first.apiKey)));
    expect(streams.map((each) => each.refusal)).toEqual([undefined, undefined, undefined]);
    // Past the key's cap: 429 with the cap named in RateLimit-Policy.
    const started = performance.now();
    const overKey = await fetch(`${api.http}/api/v1/events/stream`, {
      headers: { authorization: `Bearer ${first.apiKey}` },
    });
    expect(overKey.headers.get("ratelimit-policy")).toBe('"event_streams.per_key";q=3');
    expectRefused([await refusalOf(overKey, started)], 429, "quota_exceeded");
    const byKey = await Promise.all(Array.from({ length: FLOOD }, () => open(first.apiKey)));
    expectRefused(
      byKey.map((each) => each.refusal!),
      429,
      "quota_exceeded",
    );

    // Another key of the same account: two more, then the account's cap.
    streams.push(...(await Promise.all(Array.from({ length: 2 }, () => open(secondKey)))));
    expect(streams.every((each) => each.refusal === undefined)).toBe(true);
    const byAccount = await Promise.all(Array.from({ length: FLOOD }, () => open(thirdKey)));
    expectRefused(
      byAccount.map((each) => each.refusal!),
      429,
      "quota_exceeded",
    );

    // Another account fills the process, two of them on connections that will be dropped.
    streams.push(await open(other.apiKey));
    const raw = [await openRaw(other.apiKey), await openRaw(other.apiKey)];
    await expectHeld("event_streams", 8);
    const third = await newAccount();
    const { answers: byProcess } = await floodWhileProbing(() => open(third.apiKey));
    expectRefused(
      byProcess.map((each) => each.refusal!),
      503,
      "overloaded",
    );

    for (const socket of raw) socket.resetAndDestroy();
    for (const each of streams) each.close();
    await expectHeld("event_streams", 0);
    const reopened = await open(first.apiKey);
    expect(reopened.refusal).toBeUndefined();
    reopened.close();
    await expectHeld("event_streams", 0);
  });
});

describe("Phoenix sockets", () => {
  /** Whether the phoenix client's socket opened or was refused. */
  function outcome(socket: ReturnType<typeof connect>): Promise<"open" | "refused"> {
    return new Promise((resolve) => {
      socket.onOpen(() => resolve("open"));
      socket.onError(() => resolve("refused"));
    });
  }

  async function openSockets(token: string, count: number) {
    const sockets = Array.from({ length: count }, () => connect(api.ws, token));
    return { sockets, outcomes: await Promise.all(sockets.map(outcome)) };
  }

  /** The upgrade request as a browser sends it, to read the HTTP answer a refused socket gets. */
  async function upgrade(token: string): Promise<Refusal> {
    const started = performance.now();
    const response = await fetch(`${api.http}/api/v1/messaging/websocket?token=${token}&vsn=2.0.0`, {
      headers: {
        connection: "Upgrade",
        upgrade: "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": btoa(crypto.randomUUID().slice(0, 16)),
      },
    });
    return refusalOf(response, started);
  }

  test("per token, per user and per process: the upgrade is a 429 or 503 at once, freed on close", async () => {
    const account = await newAccount();
    const [ann1, ann2, ann3] = await Promise.all(
      ["phone", "laptop", "tablet"].map((device) => tokenFor(account.apiKey, { id: "ann", name: `Ann ${device}` })),
    );
    // Another account's user: the first account's five stay under its cap of seven.
    const ben = await tokenFor((await newAccount()).apiKey, { id: "ben", name: "Ben" });
    const cleo = await tokenFor(account.apiKey, { id: "cleo", name: "Cleo" });

    const open: Array<ReturnType<typeof connect>> = [];
    const byToken = await openSockets(ann1!, 3);
    open.push(...byToken.sockets);
    expect(byToken.outcomes).toEqual(["open", "open", "open"]);
    // The phoenix client is refused, and the answer it got is a 429 in the error shape.
    const refusedClient = await openSockets(ann1!, 1);
    expect(refusedClient.outcomes).toEqual(["refused"]);
    refusedClient.sockets[0]!.disconnect();
    const byTokenFlood = await Promise.all(Array.from({ length: FLOOD }, () => upgrade(ann1!)));
    expectRefused(byTokenFlood, 429, "quota_exceeded");
    expect(byTokenFlood[0]!.policy).toBe('"sockets.per_token";q=3');

    // Another token of the same user: two more, then the user's cap.
    const second = await openSockets(ann2!, 2);
    open.push(...second.sockets);
    expect(second.outcomes).toEqual(["open", "open"]);
    expectRefused(await Promise.all(Array.from({ length: FLOOD }, () => upgrade(ann3!))), 429, "quota_exceeded");

    // Another account's user's three, held by a client process that will be killed, fill the process.
    const client = Bun.spawn([process.execPath, "test/support/held-sockets.ts", api.ws, ben, "3"], {
      stdout: "pipe",
      stderr: "inherit",
    });
    const ready = await new Response(client.stdout).body!.getReader().read();
    expect(new TextDecoder().decode(ready.value)).toContain("ready");
    await expectHeld("sockets", 8);
    const { answers: byProcess } = await floodWhileProbing(() => upgrade(cleo));
    expectRefused(byProcess, 503, "overloaded");

    // Killed: its sockets end without a close frame. The rest close as clients do.
    client.kill("SIGKILL");
    await client.exited;
    await expectHeld("sockets", 5);
    await Promise.all(open.map(disconnect));
    await expectHeld("sockets", 0);
    const after = await openSockets(cleo, 1);
    expect(after.outcomes).toEqual(["open"]);
    await disconnect(after.sockets[0]!);
    await expectHeld("sockets", 0);
  });

  test("a WebSocket request that is no handshake is a 400 in the error shape and holds nothing", async () => {
    const token = await tokenFor((await newAccount()).apiKey, { id: "dana", name: "Dana" });
    // No Sec-WebSocket-Key: the route takes the slot, Bun cannot upgrade, the slot is given back at once.
    const response = await fetch(`${api.http}/api/v1/messaging/websocket?token=${token}&vsn=2.0.0`, {
      headers: { connection: "Upgrade", upgrade: "websocket", "sec-websocket-version": "13" },
    });
    expect(response.status).toBe(400);
    expect((await response.json()).error.code).toBe("bad_request");
    await expectHeld("sockets", 0);
  });

  test("per account: its users together, each under their own caps, get 429; other accounts do not", async () => {
    const account = await newAccount();
    // Three users of one account, minted as an account does for its users, hold 3 + 3 + 1.
    const users = await Promise.all(
      ["pat", "quinn", "ray", "sam"].map((id) => tokenFor(account.apiKey, { id, name: id })),
    );
    const open: Array<ReturnType<typeof connect>> = [];
    for (const [token, count] of [
      [users[0]!, 3],
      [users[1]!, 3],
      [users[2]!, 1],
    ] as const) {
      const opened = await openSockets(token, count);
      open.push(...opened.sockets);
      expect(opened.outcomes).toEqual(Array(count).fill("open"));
    }
    await expectHeld("sockets", 7);
    // A fourth user of the account, who holds nothing, and the third, under its own caps: the account's cap.
    const byAccount = await Promise.all(
      Array.from({ length: FLOOD }, (_, i) => upgrade(i % 2 === 0 ? users[3]! : users[2]!)),
    );
    expectRefused(byAccount, 429, "quota_exceeded");
    expect(byAccount[0]!.policy).toBe('"sockets.per_account";q=7');
    expect(await metric("parley_held_cap", "sockets", ',per="account"')).toBe(7);
    expect(await metric("parley_held_refused_total", "sockets", ',cap="sockets.per_account"')).toBe(FLOOD);
    // Another account still gets the process's last socket.
    const other = await openSockets(await tokenFor((await newAccount()).apiKey, { id: "pat", name: "Pat" }), 1);
    open.push(...other.sockets);
    expect(other.outcomes).toEqual(["open"]);

    // One closed, and the account's next user is let in.
    await disconnect(open.shift()!);
    const after = await openSockets(users[3]!, 1);
    open.push(...after.sockets);
    expect(after.outcomes).toEqual(["open"]);
    await Promise.all(open.map(disconnect));
    await expectHeld("sockets", 0);
  });

  test("topics per socket: a join past the cap gets the error reply 'too many topics'; leaving frees it", async () => {
    const account = await newAccount();
    const token = await tokenFor(account.apiKey, { id: "dee", name: "Dee" });
    const socket = connect(api.ws, token);
    const channels = Array.from({ length: 4 }, (_, i) => socket.channel(`rtc:topic-${i}`));
    await Promise.all(channels.map(join));
    await expectHeld("socket_topics", 4);
    // Fewer than the other floods: the joins and leaves count against the user's 100 frames a second.
    const refused = await Promise.all(
      Array.from({ length: 30 }, async (_, i) => {
        const channel = socket.channel(`rtc:more-${i}`);
        const reply = await join(channel).then(
          () => "joined",
          (error: { response: unknown }) => error.response,
        );
        // The client would try the join again later, as Phoenix's does after an error reply.
        channel.leave();
        return reply;
      }),
    );
    for (const reply of refused)
      expect(reply).toEqual({ reason: "too many topics", message: expect.stringContaining("at most 4 topics") });
    expect(await held("socket_topics")).toBe(4);
    // The socket lives on: leave one and another topic is joined.
    await new Promise((resolve) => channels[0]!.leave().receive("ok", resolve));
    await join(socket.channel("rtc:after-leave"));

    // An abrupt end of the client frees every topic it had joined.
    const client = Bun.spawn([process.execPath, "test/support/held-sockets.ts", api.ws, token, "1", "4"], {
      stdout: "pipe",
      stderr: "inherit",
    });
    const ready = await new Response(client.stdout).body!.getReader().read();
    expect(new TextDecoder().decode(ready.value)).toContain("ready");
    await expectHeld("socket_topics", 8);
    client.kill("SIGKILL");
    await client.exited;
    await disconnect(socket);
    await expectHeld("socket_topics", 0);
  });
});

describe("console live feeds", () => {
  /** A console session of the account's owner: its cookie, as the browser keeps it. */
  async function signIn(apiKey: string): Promise<string> {
    const answer = await fetch(`${api.http}/console/api/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ api_key: apiKey }),
    });
    expect(answer.status).toBe(200);
    return answer.headers.get("set-cookie")!.split(";")[0]!;
  }

  /** A live feed as the console page opens it, or its refusal. */
  async function feed(cookie: string) {
    const abort = new AbortController();
    const started = performance.now();
    const response = await fetch(`${api.http}/console/api/live?view=streams`, {
      headers: { cookie, accept: "text/event-stream" },
      signal: abort.signal,
    });
    if (response.status !== 200) return { refusal: await refusalOf(response, started), close: () => {} };
    const reader = response.body!.getReader();
    // The feed's first snapshot: it is open and being served. The reader is kept, since a
    // response collected as garbage would close its connection.
    expect(new TextDecoder().decode((await reader.read()).value)).toStartWith("event: snapshot");
    return { refusal: undefined, reader, close: () => abort.abort() };
  }

  /** A feed on a bare TCP connection, which the test can drop without a goodbye. */
  async function feedRaw(cookie: string) {
    const socket = tcpConnect(Number(new URL(api.http).port), "127.0.0.1");
    const head = new Promise<string>((resolve) => socket.once("data", (chunk) => resolve(String(chunk))));
    socket.write(`GET /console/api/live?view=overview HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: ${cookie}\r\n\r\n`);
    expect(await head).toStartWith("HTTP/1.1 200");
    return socket;
  }

  test("per console session and per process: 429 or 503 at once, freed on close, abrupt too", async () => {
    const owner = await newAccount();
    const [first, second, third] = [await signIn(owner.apiKey), await signIn(owner.apiKey), await signIn(owner.apiKey)];

    const feeds = await Promise.all(Array.from({ length: 3 }, () => feed(first)));
    expect(feeds.map((each) => each.refusal)).toEqual([undefined, undefined, undefined]);
    // The same session, a fourth page: 429, the cap named.
    const bySession = await Promise.all(Array.from({ length: FLOOD }, () => feed(first)));
    expectRefused(
      bySession.map((each) => each.refusal!),
      429,
      "quota_exceeded",
    );
    expect(bySession[0]!.refusal!.policy).toBe('"console_feeds.per_session";q=3');

    // Another session fills the process, on connections that will be dropped.
    const raw = [await feedRaw(second), await feedRaw(second)];
    await expectHeld("console_feeds", 5);
    const { answers: byProcess } = await floodWhileProbing(() => feed(third));
    expectRefused(
      byProcess.map((each) => each.refusal!),
      503,
      "overloaded",
    );
    expect(await metric("parley_held_cap", "console_feeds", ',per="console session"')).toBe(3);
    expect(await metric("parley_held_refused_total", "console_feeds", ',cap="console_feeds.per_session"')).toBe(FLOOD);

    for (const socket of raw) socket.resetAndDestroy();
    for (const each of feeds) each.close();
    await expectHeld("console_feeds", 0);
    const reopened = await feed(third);
    expect(reopened.refusal).toBeUndefined();
    reopened.close();
    await expectHeld("console_feeds", 0);
  });
});

describe("startRecording and stopRecording waiting for the recorder", () => {
  /** A start of the room's stream: no recorder runs here, so it waits until the row leaves `starting`. */
  async function start(apiKey: string, room: string): Promise<Refusal & { started?: boolean }> {
    const started = performance.now();
    const response = await fetch(`${api.http}/terraform/v1/hooks/srs/startRecording`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ room_name: room }),
    });
    // As startRecording's clients read every failure: `started: false` beside the error.
    const body = (await response.clone().json()) as { started?: boolean };
    return { ...(await refusalOf(response, started)), started: body.started };
  }

  test("per account and per process: 429 or 503 at once, freed when the waits are answered", async () => {
    const [first, second, third] = [await newAccount(), await newAccount(), await newAccount()];
    // The flood below passes the streaming rate of 100 a second: it is the cap that must answer.
    await setLimit(third.accountId, "requests.streaming", 1_000_000);
    const rooms = [`wait-a-${crypto.randomUUID().slice(0, 8)}`, `wait-b-${crypto.randomUUID().slice(0, 8)}`];
    const waiting = [
      ...Array.from({ length: 3 }, () => start(first.apiKey, rooms[0]!)),
      ...Array.from({ length: 2 }, () => start(second.apiKey, rooms[1]!)),
    ];
    await expectHeld("streaming_waits", 5);
    const byAccount = await Promise.all(Array.from({ length: FLOOD }, () => start(first.apiKey, rooms[0]!)));
    expectRefused(byAccount, 429, "quota_exceeded");
    expect(byAccount[0]!.policy).toBe('"streaming.waits.per_account";q=3');
    expect(byAccount[0]!.started).toBe(false);
    const { answers: byProcess } = await floodWhileProbing(() => start(third.apiKey, "wait-c"));
    expectRefused(byProcess, 503, "overloaded");
    expect(byProcess.every((answer) => answer.started === false)).toBe(true);
    expect(await metric("parley_held_cap", "streaming_waits", ',per="account"')).toBe(3);

    // The recorder gives up: every waiting start is answered, and the slots are free.
    await db.update(streams).set({ state: "failed", reason: "test" }).where(inArray(streams.room, rooms));
    for (const answer of await Promise.all(waiting)) expect(answer.status).toBe(503);
    await expectHeld("streaming_waits", 0);
  });
});
