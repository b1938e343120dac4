/**
 * Per-account limits as clients meet them: 429 with the error shape, Retry-After and the
 * RateLimit headers; counters shared by two API processes through Redis; the admin command
 * line changing a value on running processes; quotas counted in PostgreSQL (live streams,
 * recordings, stored chat bytes); the socket's error reply; per-address limits on the
 * public routes; and what happens when Redis goes away.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { randomUUID } from "node:crypto";
import type { Subprocess } from "bun";
import { eq } from "drizzle-orm";
import { overrideConfig } from "../../src/core/config";
import { db } from "../../src/db/client";
import { createApiKey, listenForInvalidations } from "../../src/modules/accounts/service";
import { quotaUsage } from "../../src/modules/limits/schema";
import { addressCounter } from "../../src/modules/limits/rates";
import { setLimit, storedChatBytes } from "../../src/modules/limits/service";
import { createRoom } from "../../src/modules/chat/rooms";
import { actorFrom } from "../../src/modules/auth/actor";
import { STREAM_NAME_RANDOM_BYTES, streamNameFor } from "../../src/modules/streaming/stream";
import { streamCost } from "../../src/modules/streaming/cost";
import { optionsOf } from "../../src/modules/streaming/request";
import { streams } from "../../src/modules/streaming/schema";
import { verifyAccessToken } from "../../src/modules/auth/access-token";
import { call, newAccount, tokenFor } from "../helpers";
import { connect, disconnect, join, push } from "../support/phoenix";
import { type ApiProcess, startApiProcess } from "../support/api-process";
import { freePort } from "../support/ports";
import { until } from "../support/wait";
import { adminCli } from "../support/admin-cli";

const processes: Subprocess[] = [];
let apis: Array<{ http: string; ws: string }>;

async function startApi(extraEnv: Record<string, string> = {}): Promise<ApiProcess> {
  const api = await startApiProcess(extraEnv);
  processes.push(api.child);
  return api;
}

beforeAll(async () => {
  // No recorder worker runs here: a start that passes its quota times out after a second.
  const quick = { STREAMING_OPERATION_TIMEOUT_MS: "1000" };
  apis = await Promise.all([startApi(quick), startApi({ ...quick, LIMIT_PUBLIC_PER_IP: "5" })]);
}, 30_000);

afterAll(async () => {
  for (const child of processes) child.kill("SIGTERM");
  const exited = Promise.all(processes.map((child) => child.exited));
  if ((await Promise.race([exited.then(() => true), Bun.sleep(5_000).then(() => false)])) === false) {
    for (const child of processes) child.kill("SIGKILL");
  }
  await exited;
});

// Limits a test only needs in place are set through the service: each admin command is a bun
// process of its own, a third of a second of CPU. The command line itself is what
// "set-limit reaches running processes" and the show-limits checks are about.
const mint = (base: string, apiKey: string) =>
  fetch(`${base}/api/v1/misc/generate-token`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ apiKey, user: { id: "alice" } }),
  });

describe("rates across two API processes", () => {
  test("token minting per API key: one count for both processes, 429 with the headers, others unaffected", async () => {
    const busy = await newAccount();
    const other = await newAccount();
    await setLimit(busy.accountId, "tokens.per_key", 6);

    // Redis windows are not aligned to the clock: a fresh key's window starts at its first
    // request, so the burst lands in one; should it not, it is tried again once that window is over.
    let statuses: number[] = [];
    let refused: Response | undefined;
    for (let attempt = 0; attempt < 3; attempt++) {
      if (attempt > 0) await Bun.sleep(2_100);
      const answers = [];
      for (let i = 0; i < 8; i++) answers.push(await mint(apis[i % 2]!.http, busy.apiKey));
      statuses = answers.map((answer) => answer.status);
      refused = answers.find((answer) => answer.status === 429);
      if (statuses.filter((status) => status === 200).length === 6) break;
    }
    expect(statuses.filter((status) => status === 200).length).toBe(6);
    expect(statuses.filter((status) => status === 429).length).toBe(2);
    expect(refused).toBeDefined();
    const body = (await refused!.json()) as { error: { code: string; message: string }; retry_after: number };
    expect(body.error.code).toBe("rate_limited");
    expect(body.error.message).toContain("tokens.per_key");
    const retryAfter = Number(refused!.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(2);
    expect(body.retry_after).toBe(retryAfter);
    expect(refused!.headers.get("ratelimit-policy")).toContain('"tokens.per_key";q=6;w=2');
    expect(refused!.headers.get("ratelimit")).toMatch(/"tokens\.per_key";r=0;t=[12]/);

    // A successful answer carries the headers too, with what is left.
    const fine = await mint(apis[0]!.http, other.apiKey);
    expect(fine.status).toBe(200);
    expect(fine.headers.get("ratelimit-policy")).toContain('"tokens.per_key";q=200;w=2');
    expect(fine.headers.get("ratelimit")).toMatch(/"tokens\.per_key";r=199;t=\d/);
    // The busy account is still refused while the other one mints freely.
    expect((await mint(apis[1]!.http, busy.apiKey)).status).toBe(429);
    for (let i = 0; i < 10; i++) expect((await mint(apis[i % 2]!.http, other.apiKey)).status).toBe(200);
  }, 30_000);

  test("set-limit reaches running processes at once, and default gives the value back", async () => {
    const account = await newAccount();
    const list = (base: string) =>
      fetch(`${base}/api/v1/scheduler/conference`, { headers: { authorization: account.apiKey } });
    // Both processes have the account's limits cached before the change.
    expect((await list(apis[0]!.http)).status).toBe(200);
    expect((await list(apis[1]!.http)).status).toBe(200);
    expect(adminCli("set-limit", account.accountId, "requests.scheduler", "0").code).toBe(0);
    for (const api of apis) {
      // The broadcast reaches the processes within milliseconds of the command's exit.
      const answer = await until(
        () => list(api.http),
        (response) => response.status === 429,
        1_000,
        20,
      );
      expect(answer.status).toBe(429);
      expect(answer.headers.get("ratelimit-policy")).toContain('"requests.scheduler";q=0;w=1');
      expect(((await answer.json()) as { error: { code: string } }).error.code).toBe("rate_limited");
    }
    const shown = adminCli("show-limits", account.accountId, "--json");
    expect(shown.code).toBe(0);
    const scheduler = JSON.parse(shown.out).limits.find(
      (limit: { name: string }) => limit.name === "requests.scheduler",
    );
    expect(scheduler).toMatchObject({ value: 0, overridden: true, default: 500 });

    expect(adminCli("set-limit", account.accountId, "requests.scheduler", "default").code).toBe(0);
    for (const api of apis)
      expect(
        (
          await until(
            () => list(api.http),
            (response) => response.status === 200,
            1_000,
            20,
          )
        ).status,
      ).toBe(200);

    const misuse = adminCli("set-limit", account.accountId, "requests.everything", "5");
    expect(misuse.code).toBe(1);
    expect(misuse.err).toContain('no limit "requests.everything"');
    expect(adminCli("set-limit", account.accountId, "tokens.per_key", "-1").code).toBe(2);
  }, 30_000);

  test("socket frames per user: a Phoenix error reply, the socket stays open, other users unaffected", async () => {
    const account = await newAccount();
    const alice = await tokenFor(account.apiKey, { id: "alice" }, "messaging");
    const bob = await tokenFor(account.apiKey, { id: "bob" }, "messaging");
    await createRoom(actorFrom(await verifyAccessToken(alice, "messaging")), { channelId: "limited" });
    await setLimit(account.accountId, "socket.messages", 4);

    // Alice on both processes: the frames of both sockets count together. Her counter is new, so
    // its first window starts with her first frame and the burst below falls in it.
    const socketA = connect(apis[0]!.ws, alice);
    const socketB = connect(apis[1]!.ws, alice);
    const socketBob = connect(apis[1]!.ws, bob);
    const channelA = socketA.channel("rtc:limited");
    const channelB = socketB.channel("rtc:limited");
    const channelBob = socketBob.channel("rtc:limited");
    await join(channelA);
    await join(channelB);
    await join(channelBob);
    // Twice the budget at once, so the burst falls in one window even when a busy machine is slow to send it.
    const replies = await Promise.all(
      Array.from({ length: 8 }, (_, i) => push(i % 2 ? channelB : channelA, "signal", { n: i })),
    );
    const statuses = replies.map((reply) => reply.status);
    expect(statuses.filter((status) => status === "ok").length).toBeGreaterThanOrEqual(1);
    const refused = replies.find((reply) => reply.status === "error");
    expect(refused?.response).toMatchObject({ reason: "rate_limited" });
    expect(refused!.response.retry_after).toBeGreaterThanOrEqual(1);
    expect(refused!.response.message).toContain("socket.messages");
    // Bob's own count is untouched.
    expect((await push(channelBob, "signal", { n: 1 })).status).toBe("ok");
    // The sockets stayed open and work again in the next window.
    expect(socketA.isConnected() && socketB.isConnected()).toBe(true);
    const again = await until(
      () => push(channelA, "signal", { again: true }),
      (reply) => reply.status === "ok",
      // The window is a second; a refused push in it is retried.
      3_000,
      100,
    );
    expect(again.status).toBe("ok");
    await Promise.all([disconnect(socketA), disconnect(socketB), disconnect(socketBob)]);
  }, 30_000);
});

describe("routes without a credential", () => {
  test("viewer counts are counted per client address: 429 with the headers, still no credential needed", async () => {
    const url = `${apis[1]!.http}/terraform/v1/hooks/srs/live/viewers/count/${streamNameFor("nobody")}`;
    let statuses: number[] = [];
    let refused: Response | undefined;
    // Earlier tests' requests from this address may have opened a window: when the burst
    // straddles two, it is tried again once the second is over.
    for (let attempt = 0; attempt < 3; attempt++) {
      if (attempt > 0) await Bun.sleep(1_050);
      const answers = [];
      for (let i = 0; i < 7; i++) answers.push(await fetch(url));
      statuses = answers.map((answer) => answer.status);
      refused = answers.find((answer) => answer.status === 429);
      if (statuses.filter((status) => status === 404).length === 5) break;
    }
    expect(statuses.filter((status) => status === 404).length).toBe(5);
    expect(statuses.filter((status) => status === 429).length).toBe(2);
    expect(((await refused!.json()) as { error: { code: string } }).error.code).toBe("rate_limited");
    expect(refused!.headers.get("ratelimit-policy")).toBe('"public.per_ip";q=5;w=1');
    expect(refused!.headers.get("retry-after")).toBe("1");
  });

  test("an IPv6 client is counted by its /64, an IPv4 one by its address however it arrives", () => {
    expect(addressCounter("2001:db8:1:2:aaaa::1")).toBe("2001:db8:1:2::/64");
    expect(addressCounter("2001:0db8:0001:0002:bbbb:cccc:dddd:eeee")).toBe("2001:db8:1:2::/64");
    expect(addressCounter("2001:db8::1")).toBe("2001:db8:0:0::/64");
    expect(addressCounter("::1")).toBe("0:0:0:0::/64");
    expect(addressCounter("fe80::1%eth0")).toBe("fe80:0:0:0::/64");
    expect(addressCounter("::ffff:192.0.2.7")).toBe("192.0.2.7");
    expect(addressCounter("192.0.2.7")).toBe("192.0.2.7");
  });
});

describe("when Redis is down", () => {
  test("rates fall back to each process's memory: 429 past the limit, never a 5xx, no wait for Redis", async () => {
    const port = await freePort();
    const redis = Bun.spawn(
      ["redis-server", "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
      { stdout: "ignore", stderr: "ignore" },
    );
    processes.push(redis);
    let api: Awaited<ReturnType<typeof startApi>> | undefined;
    try {
      for (
        let i = 0;
        i < 50 &&
        Bun.spawnSync(["redis-cli", "-p", String(port), "ping"])
          .stdout.toString()
          .trim() !== "PONG";
        i++
      )
        await Bun.sleep(100);
      const account = await newAccount();
      await setLimit(account.accountId, "tokens.per_key", 3);
      api = await startApi({
        REDIS_URL: `redis://127.0.0.1:${port}`,
        REDIS_PREFIX: `parley-limits-down-${process.pid}`,
      });
      expect((await mint(api!.http, account.apiKey)).status).toBe(200);
      redis.kill("SIGKILL");
      await redis.exited;

      // Past the Redis window of tokens.per_key (2 s): units this process leased from Redis in it lapse,
      // and what follows is counted by the in-memory fallback alone.
      await Bun.sleep(2_100);
      const statuses: number[] = [];
      const started = performance.now();
      for (let i = 0; i < 5; i++) statuses.push((await mint(api!.http, account.apiKey)).status);
      const elapsed = performance.now() - started;
      // The in-memory window starts with the first request after the outage, so the burst sits in one window.
      expect(statuses).toEqual([200, 200, 200, 429, 429]);
      expect(elapsed).toBeLessThan(1_000);
    } finally {
      redis.kill("SIGKILL");
      // Shutting down without Redis is another matter (docs/fault-injection): this process is only for this test.
      api?.child.kill("SIGKILL");
    }
  });
});

describe("route families in one process", () => {
  beforeAll(() => listenForInvalidations());

  test("each family counts per account: a used-up family leaves the others and other accounts alone", async () => {
    const account = await newAccount();
    const other = await newAccount();
    await setLimit(account.accountId, "requests.scheduler", 3);
    const statuses = [];
    for (let i = 0; i < 5; i++)
      statuses.push(
        (await call("GET", "/api/v1/scheduler/conference", { headers: { authorization: account.apiKey } })).status,
      );
    expect(statuses).toEqual([200, 200, 200, 429, 429]);
    const refused = await call("GET", "/api/v1/scheduler/conference", { headers: { authorization: account.apiKey } });
    expect(refused.body.error.code).toBe("rate_limited");
    expect(refused.headers.get("ratelimit")).toContain('"requests.scheduler";r=0;t=1');
    expect(refused.headers.get("ratelimit-policy")).toContain('"requests.per_key";q=5000;w=1');
    expect(refused.headers.get("retry-after")).toBe("1");
    // Another family of the same account, and the same family of another account.
    expect(
      (await call("GET", "/api/v1/conference-mapper/phoneNumberList", { headers: { authorization: account.apiKey } }))
        .status,
    ).not.toBe(429);
    expect(
      (await call("GET", "/api/v1/scheduler/conference", { headers: { authorization: other.apiKey } })).status,
    ).toBe(200);
  });

  test("per API key: every route of a key counts together, the account's other key has its own count", async () => {
    const account = await newAccount();
    const { apiKey: secondKey } = await createApiKey(account.accountId);
    await setLimit(account.accountId, "requests.per_key", 3);
    const asKey = (key: string, path: string) => call("GET", path, { headers: { authorization: key } });
    expect((await asKey(account.apiKey, "/api/v1/scheduler/conference")).status).toBe(200);
    expect((await asKey(account.apiKey, "/api/v1/conference-mapper/phoneNumberList")).status).toBe(200);
    expect((await asKey(account.apiKey, "/api/v1/scheduler/reservation")).status).toBe(200);
    const refused = await asKey(account.apiKey, "/api/v1/conference-mapper/phoneNumberList");
    expect(refused.status).toBe(429);
    expect(refused.body.error.message).toContain("requests.per_key");
    expect(refused.headers.get("ratelimit")).toContain('"requests.per_key";r=0;t=1');
    expect((await asKey(secondKey, "/api/v1/scheduler/conference")).status).toBe(200);
  });

  test("every route family answers with its policy in the headers", async () => {
    const account = await newAccount();
    const token = await tokenFor(account.apiKey, { id: "alice" }, "messaging");
    const key = { authorization: account.apiKey };
    const bearer = { authorization: `Bearer ${token}` };
    const basic = {
      authorization: `Basic ${Buffer.from(`${account.accountId}:${account.apiKey}`).toString("base64")}`,
    };
    const answers: Record<string, Awaited<ReturnType<typeof call>>> = {
      token: await call("POST", "/api/v1/misc/generate-token", {
        body: { apiKey: account.apiKey, user: { id: "bob" } },
      }),
      scheduler: await call("GET", "/api/v1/scheduler/reservation", { headers: key }),
      mapper: await call("GET", "/api/v1/conference-mapper/phoneNumberList", { headers: key }),
      streaming: await call("POST", "/terraform/v1/hooks/srs/stopRecording", {
        headers: key,
        body: { room_name: "idle" },
      }),
      events: await call("POST", "/api/v1/events/room/created", {
        headers: key,
        body: { event_name: "muc-room-created", room_name: "r", created_at: 1 },
      }),
      messaging: await call("GET", "/api/v1/messaging/rooms", { headers: bearer }),
      uploads: await call("POST", "/api/v1/misc/get-presigned", {
        headers: bearer,
        body: { fileName: "a.png", fileType: "png", fileSize: 1 },
      }),
      usage: await call("POST", "/api/v1/pricing/cdr", {
        headers: basic,
        body: { start_date: "2026-11-20T00:00:00Z", end_date: "2026-11-21T00:00:00Z" },
      }),
    };
    for (const [family, answer] of Object.entries(answers)) {
      expect([family, answer.status < 500]).toEqual([family, true]);
      expect([family, answer.headers.get("ratelimit-policy")]).toEqual([
        family,
        expect.stringContaining(`"requests.${family}";q=`),
      ]);
      expect([family, answer.headers.get("ratelimit")]).toEqual([
        family,
        expect.stringMatching(new RegExp(`"requests\\.${family}";r=\\d+;t=1`)),
      ]);
    }
    // The key's own counters come with the routes that take the API key, and only with them.
    expect(answers.scheduler!.headers.get("ratelimit-policy")).toContain('"requests.per_key";q=5000;w=1');
    expect(answers.token!.headers.get("ratelimit-policy")).toContain('"tokens.per_key";q=200;w=2');
    expect(answers.messaging!.headers.get("ratelimit-policy")).not.toContain("per_key");
  });

  test("requests counted together in one Redis call are each counted as if alone", async () => {
    // The limits connection opens with the first count; until it is up, counts are the process's own.
    await tokenFor((await newAccount()).apiKey);
    const account = await newAccount();
    await setLimit(account.accountId, "tokens.per_key", 5);
    // Sent at once, they reach their check in the same turn of the event loop and share one script call.
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        call("POST", "/api/v1/misc/generate-token", { body: { apiKey: account.apiKey, user: { id: `u${i}` } } }),
      ),
    );
    expect(answers.filter((answer) => answer.status === 200).length).toBe(5);
    expect(answers.filter((answer) => answer.status === 429).length).toBe(3);
    const left = answers
      .filter((answer) => answer.status === 200)
      .map((answer) => Number(/"tokens\.per_key";r=(\d+)/.exec(answer.headers.get("ratelimit") ?? "")?.[1]))
      .sort();
    expect(left).toEqual([0, 1, 2, 3, 4]);
    // Used up until the window ends.
    expect((await call("POST", "/api/v1/misc/generate-token", { body: { apiKey: account.apiKey } })).status).toBe(429);
  });

  test("credentials are checked first: a bad key is 401 and counts against nobody", async () => {
    const answer = await call("GET", "/api/v1/scheduler/conference", { headers: { authorization: "prl_nope" } });
    expect(answer.status).toBe(401);
    expect(answer.headers.get("ratelimit")).toBeNull();
  });
});

describe("quotas counted in PostgreSQL", () => {
  beforeAll(() => listenForInvalidations());

  async function liveStream(
    accountId: string,
    room: string,
    recording: boolean,
    state: "running" | "queued" = "running",
  ) {
    await db.insert(streams).values({
      id: randomUUID(),
      accountId,
      room,
      streamName: streamNameFor(room),
      state,
      options: optionsOf({ room_name: room, is_recording: recording }),
      units: streamCost(optionsOf({ room_name: room, is_recording: recording })),
    });
  }

  test("concurrent streams and recordings: 429 quota_exceeded before any recorder is asked", async () => {
    const account = await newAccount();
    const other = await newAccount();
    await setLimit(account.accountId, "streams.concurrent", 2);
    await setLimit(account.accountId, "recordings.concurrent", 1);
    await liveStream(account.accountId, "one", true);
    const start = (apiKey: string, room: string, isRecording = false) =>
      call("POST", "/terraform/v1/hooks/srs/startRecording", {
        headers: { authorization: apiKey },
        body: { room_name: room, is_recording: isRecording },
      });

    const recording = await start(account.apiKey, "two", true);
    expect(recording.status).toBe(429);
    expect(recording.body.error.code).toBe("quota_exceeded");
    expect(recording.body.started).toBe(false);
    expect(recording.body.error.message).toContain("recordings.concurrent");
    expect(recording.headers.get("retry-after")).toBe("60");
    expect(recording.headers.get("ratelimit-policy")).toBe('"recordings.concurrent";q=1');
    expect(recording.headers.get("ratelimit")).toBe('"recordings.concurrent";r=0;t=60');

    await liveStream(account.accountId, "two", false);
    const third = await start(account.apiKey, "three");
    expect(third.status).toBe(429);
    expect(third.body.error.message).toContain("streams.concurrent");
    expect(third.headers.get("ratelimit-policy")).toBe('"streams.concurrent";q=2');
    const [rows] = await Promise.all([db.select().from(streams).where(eq(streams.accountId, account.accountId))]);
    expect(rows.map((row) => row.room).sort()).toEqual(["one", "two"]);

    // The other account keeps its defaults, and this one's streams do not count against it.
    await liveStream(other.accountId, "one", true);
    await liveStream(other.accountId, "two", true);
    const show = adminCli("show-limits", other.accountId);
    expect(show.out).toMatch(/streams\.concurrent\s+50\s/);
    expect(show.out).toMatch(/recordings\.concurrent\s+20\s/);
    const mine = adminCli("show-limits", account.accountId);
    expect(mine.out).toMatch(/streams\.concurrent\s+2\s.*set \(default 50\)/);
  });

  test("recorder units at once: a start that would pass streams.units is refused, a cheaper one is not", async () => {
    const account = await newAccount();
    await setLimit(account.accountId, "streams.units", 70);
    await liveStream(account.accountId, "plain", false); // 30 units
    await liveStream(account.accountId, "waiting", true, "queued"); // 31 units
    const start = (body: Record<string, unknown>) =>
      call("POST", "/terraform/v1/hooks/srs/startRecording", { headers: { authorization: account.apiKey }, body });
    // Another plain stream is 30 units: 91 > 70.
    const refused = await start({ room_name: "ladder", multi_bitrate: true });
    expect(refused.status).toBe(429);
    expect(refused.body).toMatchObject({ started: false, error: { code: "quota_exceeded" } });
    expect(refused.body.error.message).toContain("streams.units");
    expect(refused.headers.get("retry-after")).toBe("60");
    expect(refused.headers.get("ratelimit-policy")).toBe('"streams.units";q=70;qu="recorder-units"');
    expect((await db.select().from(streams).where(eq(streams.accountId, account.accountId))).length).toBe(2);
    // Audio only is 5 units, 66 in all: admitted, and waits for a recorder that never comes here.
    const restore = overrideConfig({ streaming: { operationTimeoutMs: 300 } });
    try {
      expect((await start({ room_name: "audio", audio_only: true })).status).toBe(504);
    } finally {
      restore();
    }
  });

  test("streams waiting for a recorder are bounded per account and overall: 429 with Retry-After", async () => {
    const account = await newAccount();
    await setLimit(account.accountId, "streams.queued", 2);
    await liveStream(account.accountId, "waiting-1", false, "queued");
    await liveStream(account.accountId, "waiting-2", false, "queued");
    const refused = await call("POST", "/terraform/v1/hooks/srs/startRecording", {
      headers: { authorization: account.apiKey },
      body: { room_name: "waiting-3" },
    });
    expect(refused.status).toBe(429);
    expect(refused.body).toMatchObject({ started: false, error: { code: "quota_exceeded" } });
    expect(refused.body.error.message).toContain("streams.queued");
    expect(refused.headers.get("retry-after")).toBe("30");
    expect((await db.select().from(streams).where(eq(streams.accountId, account.accountId))).length).toBe(2);
    // The queue of all accounts together is bounded too: another account is refused once it is full.
    const restore = overrideConfig({ streaming: { queueMax: 2 } });
    try {
      const other = await newAccount();
      const full = await call("POST", "/terraform/v1/hooks/srs/startRecording", {
        headers: { authorization: other.apiKey },
        body: { room_name: "anything" },
      });
      expect(full.status).toBe(429);
      expect(full.body).toMatchObject({ started: false, error: { code: "rate_limited" } });
      expect(full.body.error.message).toContain("STREAMING_QUEUE_MAX");
      expect(full.headers.get("retry-after")).toBe("30");
    } finally {
      restore();
    }
  });

  test("concurrent starts on two processes cannot both take the last place", async () => {
    const account = await newAccount();
    await setLimit(account.accountId, "streams.concurrent", 1);
    const starts = Array.from({ length: 6 }, (_, i) =>
      fetch(`${apis[i % 2]!.http}/terraform/v1/hooks/srs/startRecording`, {
        method: "POST",
        headers: { authorization: account.apiKey, "content-type": "application/json" },
        body: JSON.stringify({ room_name: `race-${i}` }),
      }).then((answer) => answer.status),
    );
    const statuses = await Promise.all(starts);
    expect(statuses.filter((status) => status === 429).length).toBe(5);
    // The one that got the place waited for a recorder that never came.
    expect(statuses.filter((status) => status !== 429)).toEqual([504]);
  });

  test("stored chat bytes: counted by the database through posts, edits, deletes; socket error and 429", async () => {
    const account = await newAccount();
    const token = await tokenFor(account.apiKey, { id: "alice" }, "messaging");
    const auth = { authorization: `Bearer ${token}` };
    await createRoom(actorFrom(await verifyAccessToken(token, "messaging")), { channelId: "quota" });
    await setLimit(account.accountId, "chat.stored_bytes", 100);

    const socket = connect(apis[0]!.ws, token);
    const channel = socket.channel("chat:quota");
    await join(channel);
    const first = await push(channel, "new_message", { content: "é".repeat(30) }); // 60 bytes in UTF-8
    expect(first.status).toBe("ok");
    expect(await storedChatBytes(account.accountId)).toBe(60);
    const over = await push(channel, "new_message", { content: "x".repeat(41) });
    expect(over.status).toBe("error");
    expect(over.response).toMatchObject({ reason: "quota_exceeded", retry_after: 3600 });
    expect(over.response.message).toContain("chat.stored_bytes");
    const fits = await push(channel, "new_message", { content: "x".repeat(40) });
    expect(fits.status).toBe("ok");
    expect(await storedChatBytes(account.accountId)).toBe(100);
    expect(socket.isConnected()).toBe(true);

    // An edit that grows the text is refused over REST with the headers.
    const edit = await call("PUT", `/api/v1/messaging/rooms/quota/messages/${fits.response.message.id}`, {
      headers: auth,
      body: { content: "x".repeat(41) },
    });
    expect(edit.status).toBe(429);
    expect(edit.body.error.code).toBe("quota_exceeded");
    expect(edit.headers.get("retry-after")).toBe("3600");
    expect(edit.headers.get("ratelimit-policy")).toBe('"chat.stored_bytes";q=100;qu="content-bytes"');
    expect(edit.headers.get("ratelimit")).toBe('"chat.stored_bytes";r=0;t=3600');
    // One that shrinks it frees bytes.
    expect(
      (
        await call("PUT", `/api/v1/messaging/rooms/quota/messages/${fits.response.message.id}`, {
          headers: auth,
          body: { content: "x".repeat(30) },
        })
      ).status,
    ).toBe(200);
    expect(await storedChatBytes(account.accountId)).toBe(90);

    // Deleting frees the bytes (the trigger counts deletes), and posting works again.
    const deleted = await call("DELETE", "/api/v1/messaging/rooms/quota/messages", {
      headers: auth,
      body: { message_ids: [first.response.message.id] },
    });
    expect(deleted.status).toBe(200);
    expect(await storedChatBytes(account.accountId)).toBe(30);
    expect((await push(channel, "new_message", { content: "one more" })).status).toBe("ok");
    // A poll's options count with its question.
    const poll = await push(channel, "new_message", { content: "q?", content_type: "poll", options: ["yes", "no"] });
    expect(poll.status).toBe("ok");
    const [usage] = await db.select().from(quotaUsage).where(eq(quotaUsage.accountId, account.accountId));
    expect(usage!.chatBytes).toBe(30 + 8 + 2 + 3 + 2);
    await disconnect(socket);
  });
});

describe("stream names", () => {
  test("carry 128 random bits: the viewer-count and VOD routes answer anyone who knows one", () => {
    expect(STREAM_NAME_RANDOM_BYTES * 8).toBeGreaterThanOrEqual(128);
    const names = Array.from({ length: 2000 }, () => streamNameFor("weekly sync"));
    for (const name of names) expect(name).toMatch(/^weekly-sync-[0-9a-f]{32}$/);
    expect(new Set(names).size).toBe(names.length);
    // Measured: Shannon entropy of each hex digit over the sample, summed over the 32 digits.
    let bits = 0;
    for (let position = 0; position < 32; position++) {
      const counts = new Map<string, number>();
      for (const name of names) {
        const digit = name.slice(-32)[position]!;
        counts.set(digit, (counts.get(digit) ?? 0) + 1);
      }
      for (const count of counts.values()) bits -= (count / names.length) * Math.log2(count / names.length);
    }
    expect(bits).toBeGreaterThan(127);
  });
});
