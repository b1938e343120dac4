/**
 * Redis killed with SIGKILL under a little load, with every role in its own process: every
 * route answers within a bound (normally, or 503 dependency_down with Retry-After where it
 * needs Redis), /readyz stays 200 and says Redis is down, the chat socket answers joins and
 * pushes, no acknowledged message is lost or stored twice, no process dies, SIGTERM exits
 * promptly, and all is well once Redis is back.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Queue } from "bullmq";
import { eq, inArray } from "drizzle-orm";
import type { Socket } from "phoenix";
import { db } from "../../src/db/client";
import { chatMessages, chatRooms } from "../../src/modules/chat/schema";
import { streams } from "../../src/modules/streaming/schema";
import { ROLES } from "../../src/process/roles";
import { newAccount } from "../helpers";
import { recordersOf } from "../support/parley";
import { connect, disconnect, join as joinChannel, push } from "../support/phoenix";
import { freePort } from "../support/ports";
import { type PrivateRedis, privateRedis } from "../support/redis-server";
import { type Answer, ask, freshFetch, nextSerial, type Routes, routeSweep } from "../support/route-sweep";
import { childPids, until } from "../support/wait";

const entry = new URL("../../src/index.ts", import.meta.url).pathname;
/** An answer slower than this counts as none: an outage must be reported, not waited out. */
const ANSWER_WITHIN_MS = 3_000;
const fresh = freshFetch(ANSWER_WITHIN_MS);
/** The period of the workers' heartbeats, sweeps and reconciliations in this test. */
const PERIOD_MS = 1_000;
/**
 * How long a silent recorder worker or gateway counts as alive here: short enough that the
 * outage crosses their beats and a reconciliation, long enough that a beat late on a busy
 * machine (two suites at once) does not declare a live stream's recorder lost.
 */
const LOST_MS = 4_000;
/** Until /readyz reports Redis down: the API has seen its connection go. */
const redisSeenDown = (base: string) =>
  until(
    () => fresh(`${base}/readyz`).then((response) => response.json() as Promise<Record<string, string>>),
    (body) => body.redis === "down",
    10_000,
    50,
  );

describe("Redis down", () => {
  let redis: PrivateRedis;
  let supervisor: ReturnType<typeof Bun.spawn>;
  let dir: string;
  let base: string;
  /** The metrics listener of the pool, on a port of its own. */
  let metrics: string;
  let apiKey: string;
  let accountId: string;
  let token: string;
  let prefix: string;
  let liveStream: string;
  /** A message whose edit is announced to the room: a REST write that goes through the broker. */
  let editable: number;
  const sockets: Socket[] = [];

  const { json, routes } = routeSweep(fresh, () => ({ base, apiKey, accountId, token }));
  /** One request to each route family that needs no Redis: each must answer 2xx whatever Redis does. */
  const plain = {
    ...routes,
    "messaging list": () =>
      fresh(`${base}/api/v1/messaging/rooms/faults/messages`, { headers: { authorization: `Bearer ${token}` } }),
    "messaging edit": () =>
      json(
        "PUT",
        `/api/v1/messaging/rooms/faults/messages/${editable}`,
        { content: `edit ${nextSerial()}` },
        `Bearer ${token}`,
      ),
    uploads: () =>
      json(
        "POST",
        "/api/v1/misc/get-presigned",
        { fileName: `f${nextSerial()}.png`, fileType: "image/png", fileSize: 1 },
        `Bearer ${token}`,
      ),
    "media on_publish": () =>
      fresh(`${base}/terraform/v1/hooks/srs/on_publish`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: `call=publish&app=live&name=${liveStream}&clientid=p${nextSerial()}`,
      }),
    "media on_play": () =>
      fresh(`${base}/terraform/v1/hooks/srs/on_play`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: `call=play&app=live&name=${liveStream}&clientid=v${nextSerial()}`,
      }),
    healthz: () => fresh(`${base}/healthz`),
    readyz: () => fresh(`${base}/readyz`),
    metrics: () => fresh(metrics),
    jwks: () => fresh(`${base}/.well-known/jwks.json`),
  };
  /** Routes that need Redis: 503 dependency_down with Retry-After while it is down. */
  const needRedis = {
    "viewer count": () => fresh(`${base}/terraform/v1/hooks/srs/live/viewers/count/${liveStream}`),
    startRecording: () =>
      json("POST", "/terraform/v1/hooks/srs/startRecording", { room_name: `down-${nextSerial()}` }, apiKey),
    stopRecording: () => json("POST", "/terraform/v1/hooks/srs/stopRecording", { room_name: "live" }, apiKey),
  };

  async function startSupervisor(port: number, metricsPort: number) {
    return Bun.spawn([process.execPath, entry], {
      env: {
        ...process.env,
        REDIS_URL: redis.url,
        REDIS_PREFIX: prefix,
        PORT: String(port),
        METRICS_PORT: String(metricsPort),
        HOST: "127.0.0.1",
        API_PROCESSES: "2",
        // Every role in its own process: none may die of the outage, each counted alone.
        WORKER_PROCESSES: "per-role",
        DATA_DIR: dir,
        LOG_LEVEL: "warn",
        STREAMING_RECORDER_DRIVER: "command",
        STREAMING_RECORDER_COMMAND: "echo ready; exec sleep 120",
        STREAMING_OPERATION_TIMEOUT_MS: "10000",
        SIP_UDP_PORT: String(await freePort()),
        SIP_TCP_PORT: String(await freePort()),
        // The workers' periodic Redis and database work, often here (recorder heartbeats every
        // 1.2 s and reconciliations every 4 s, gateway beats every 1.3 s, sweeps every second;
        // by default 3 s, 10 s, 2 s, 5 s and 30 s), so the outage below crosses runs of each.
        STREAMING_RECORDER_LOST_MS: String(LOST_MS),
        SIP_GATEWAY_LOST_MS: String(LOST_MS),
        WEBHOOK_SWEEP_INTERVAL_MS: String(PERIOD_MS),
        USAGE_SWEEP_INTERVAL_MS: String(PERIOD_MS),
      },
      stdout: Bun.file(join(dir, "parley.log")),
      stderr: Bun.file(join(dir, "parley.err")),
    });
  }

  beforeAll(async () => {
    redis = await privateRedis();
    dir = mkdtempSync(join(tmpdir(), "parley-redisdown-"));
    prefix = `parley-test-redisdown-${crypto.randomUUID()}`;
    ({ apiKey, accountId } = await newAccount());
    const port = await freePort();
    const metricsPort = await freePort();
    base = `http://127.0.0.1:${port}`;
    metrics = `http://127.0.0.1:${metricsPort}/metrics`;
    supervisor = await startSupervisor(port, metricsPort);
    // Every role in a process of its own: seconds on an idle machine, many more on one running two suites.
    const readyz = () =>
      fresh(`${base}/readyz`).then(
        (r) => r.status,
        () => 0,
      );
    if ((await until(readyz, (status) => status === 200, 60_000, 200)) !== 200) {
      throw new Error(`Parley was not ready within 60 s:\n${readFileSync(join(dir, "parley.err"), "utf8")}`);
    }
    const created = await json(
      "POST",
      "/api/v1/misc/generate-token",
      { apiKey, user: { id: "alice", name: "Alice" }, scope: "messaging" },
      "",
    );
    token = ((await created.json()) as { token: string }).token;
    for (const channel of ["faults", "late"]) {
      const room = await json("POST", "/api/v1/messaging/rooms/create", { channel_id: channel }, `Bearer ${token}`);
      expect(room.status).toBe(201);
    }
    const first = connect(base.replace("http", "ws"), token);
    const room = first.channel("chat:faults", {});
    await joinChannel(room);
    editable = (await push(room, "new_message", { content: "edit me" })).response.message.id;
    await disconnect(first);
    const started = await json("POST", "/terraform/v1/hooks/srs/startRecording", { room_name: "live" }, apiKey);
    expect(started.status).toBe(200);
    liveStream = ((await started.json()) as { stream_name: string }).stream_name;
  }, 120_000);

  afterAll(async () => {
    for (const socket of sockets) await disconnect(socket).catch(() => {});
    supervisor?.kill("SIGKILL");
    await supervisor?.exited;
    for (const pid of recordersOf(liveStream ?? "none")) process.kill(-pid, "SIGKILL");
    await redis?.kill();
    rmSync(dir, { recursive: true, force: true });
  });

  test("every route answers in a bound, 503 only where Redis is needed; the socket answers; all resumes", async () => {
    const before = await until(
      () => childPids(supervisor.pid),
      (pids) => pids.length === Object.keys(ROLES).length + 1,
      15_000,
    );
    expect(before).toHaveLength(Object.keys(ROLES).length + 1);
    // Healthy once warm: on a busy machine the first requests of a freshly started process (its
    // first database connections, code compiled on first use) took over ANSWER_WITHIN_MS before
    // any fault; the bound is for the outage below, so this asks again under a generous ceiling.
    const healthy = await until(
      () => ask(plain),
      (answers) => answers.every((answer) => answer.status > 0 && answer.status < 300),
      30_000,
      250,
    );
    expect(healthy.filter((answer) => answer.status === 0 || answer.status >= 300)).toEqual([]);

    const socket = connect(base.replace("http", "ws"), token);
    sockets.push(socket);
    const channel = socket.channel("chat:faults", {});
    await joinChannel(channel);

    // A client that sends each message until it is acknowledged, sending again after an error reply.
    const acknowledged: string[] = [];
    const unanswered: string[] = [];
    let sending = true;
    const chatter = (async () => {
      for (let i = 0; sending; i++) {
        const content = `m${i}`;
        for (let attempt = 0; attempt < 20; attempt++) {
          const reply = await push(channel, "new_message", { content }).catch(() => undefined);
          if (reply === undefined) {
            unanswered.push(content);
            break;
          }
          if (reply.status === "ok") {
            acknowledged.push(content);
            break;
          }
          expect(reply.response).toMatchObject({ reason: "dependency_down", retry_after: 5 });
          await Bun.sleep(200);
        }
        await Bun.sleep(50);
      }
    })();
    let loading = true;
    const seen: Answer[] = [];
    const load = (async () => {
      while (loading) seen.push(...(await ask(plain)));
    })();
    // Both flow before Redis dies.
    expect(
      await until(
        () => seen.length * acknowledged.length,
        (n) => n > 0,
        15_000,
        20,
      ),
    ).toBeGreaterThan(0);
    await redis.kill();
    const killedAt = Date.now();

    // Every route, during the outage: within the bound; 2xx unless it needs Redis, then 503.
    expect(await redisSeenDown(base)).toMatchObject({ redis: "down" });
    const everyRoute: Routes = { ...plain, ...needRedis };
    const first = await ask(everyRoute);
    // A route that did not answer within ANSWER_WITHIN_MS shows as status 0, and is asked once
    // more: one that waits on Redis is late every time, one that queued behind a busy machine's
    // other work (two suites on two cores) seldom twice in a row.
    const timedOut = first.filter((answer) => answer.status === 0).map((answer) => answer.route);
    const askedAgain = await ask(Object.fromEntries(timedOut.map((route) => [route, everyRoute[route]!])));
    const down = [...first.filter((answer) => answer.status !== 0), ...askedAgain];
    expect(
      down.filter((answer) => !(answer.route in needRedis) && (answer.status === 0 || answer.status >= 300)),
    ).toEqual([]);
    for (const answer of down.filter((a) => a.route in needRedis)) {
      expect(answer).toEqual({ ...answer, status: 503, code: "dependency_down", retryAfter: "5" });
    }
    const slowest = Math.max(...down.map((answer) => answer.ms));
    const ready = await fresh(`${base}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: "degraded", database: "ok", redis: "down" });
    expect(await (await fresh(metrics)).text()).toContain("parley_http_requests_total");

    // The refused start left no stream waiting to start: its row failed, with the reason.
    const refused = await db.select().from(streams).where(eq(streams.accountId, accountId));
    expect(refused.filter((stream) => stream.state === "starting")).toEqual([]);
    const failed = refused.filter((stream) => stream.state === "failed");
    expect(failed.length).toBeGreaterThan(0);
    expect(failed.every((stream) => stream.reason === "queue_unavailable")).toBe(true);
    // The stop that was refused left the live stream running.
    expect(refused.find((stream) => stream.streamName === liveStream)?.state).toBe("running");

    // A new socket and a join on an open one are answered; so is a push.
    const late = connect(base.replace("http", "ws"), token);
    sockets.push(late);
    const lateChannel = late.channel("chat:late", {});
    const joinStarted = Date.now();
    await joinChannel(lateChannel);
    const joinMs = Date.now() - joinStarted;
    const pushed = await push(lateChannel, "new_message", { content: "during the outage" });
    expect(pushed.status).toBe("ok");
    const rtc = socket.channel("rtc:faults", {});
    await joinChannel(rtc);
    expect((await push(rtc, "offer", { sdp: "x" })).status).toBe("ok");

    // A soak, long enough for several of the workers' heartbeats and sweeps (PERIOD_MS), a
    // reconciliation (LOST_MS) and the realtime broker's reconnection attempts to hit the outage.
    await Bun.sleep(LOST_MS + 500);
    loading = false;
    await load;
    const bad = seen.filter((answer) => answer.status === 0 || answer.status >= 300);
    // A publish refused means the live stream left its live states: shown with its reason, so a failure says why.
    const [during] = await db.select().from(streams).where(eq(streams.streamName, liveStream));
    expect({ bad, stream: bad.length > 0 ? `${during?.state}: ${during?.reason}` : "live" }).toEqual({
      bad: [],
      stream: "live",
    });

    await redis.start();
    const restartedAt = Date.now();
    const back = await until(
      () => ask({ ...plain, "viewer count": needRedis["viewer count"]! }),
      (answers) => answers.every((a) => a.status > 0 && a.status < 300),
      20_000,
      250,
    );
    // The live stream's state and reason shown beside any refusal (a media callback's 403), so a failure says why.
    const refusedBack = back.filter((answer) => answer.status === 0 || answer.status >= 300);
    const liveRow = async () => {
      const [row] = await db.select().from(streams).where(eq(streams.streamName, liveStream));
      return row ? `${row.state}${row.reason ? `: ${row.reason}` : ""}` : "no row";
    };
    expect({ refused: refusedBack, stream: await liveRow() }).toEqual({ refused: [], stream: "running" });
    const backMs = Date.now() - restartedAt;
    // readyz pings Redis on the process's shared connection, which may reconnect a moment after the routes' own.
    const readyAgain = await until(
      () => fresh(`${base}/readyz`).then((response) => response.json() as Promise<Record<string, string>>),
      (body) => body.status === "ok",
      10_000,
      250,
    );
    expect(readyAgain).toEqual({ status: "ok", database: "ok", redis: "ok" });
    sending = false;
    await chatter;

    // A start job that reaches Redis late, for a stream already failed, starts no recorder.
    const queue = new Queue("recorder", {
      connection: { host: "127.0.0.1", port: redis.port },
      prefix: `${prefix}:bull`,
    });
    const stale = failed[0]!;
    await queue.add(
      "start",
      { streamId: stale.id, destinations: [] },
      { jobId: `late-${stale.id}`, removeOnComplete: true, removeOnFail: true },
    );
    // So does a stop that reaches Redis late, after its request was answered 503 (the stream goes
    // on): queued while a connection was between two reconnection attempts, it is sent once Redis
    // is back. The live stream, never marked stopping, keeps running.
    const live = (await db.select().from(streams).where(eq(streams.streamName, liveStream)))[0]!;
    await queue.add(
      "stop",
      { streamId: live.id, reason: "requested" },
      { jobId: `late-stop-${live.id}`, removeOnComplete: true, removeOnFail: true },
    );
    await until(
      () => queue.getJobCounts("waiting", "active"),
      (counts) => counts.waiting + counts.active === 0,
      10_000,
      100,
    );
    await queue.close();
    expect(recordersOf(stale.streamName)).toEqual([]);
    expect((await db.select().from(streams).where(eq(streams.id, stale.id)))[0]?.state).toBe("failed");
    expect(await liveRow()).toBe("running");

    // Streams start and stop again. The requests above reached one API process, and each
    // connection of each process comes back on its own, within half a second of the others: a
    // client that meets one still away gets 503 with Retry-After and asks again, as these do (sooner).
    const retried = (request: () => Promise<Response>) =>
      until(request, (response) => response.status !== 503, 5_000, 250);
    // A stop answered 503 just as Redis came back may still have queued its job (the queue says
    // so, src/queue/queues.ts): then "live" is already stopped and this one finds no live stream.
    const stopped = await retried(() =>
      json("POST", "/terraform/v1/hooks/srs/stopRecording", { room_name: "live" }, apiKey),
    );
    if (stopped.status === 404) {
      const [row] = await db.select().from(streams).where(eq(streams.streamName, liveStream));
      expect(row?.state).toBe("stopped");
    } else {
      expect(stopped.status).toBe(200);
    }
    const again = await retried(() =>
      fresh(`${base}/terraform/v1/hooks/srs/startRecording`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: apiKey },
        body: JSON.stringify({ room_name: "again" }),
        signal: AbortSignal.timeout(15_000),
      }),
    );
    expect(again.status).toBe(200);
    liveStream = ((await again.json()) as { stream_name: string }).stream_name;
    // And a stream started after the outage stops as any does.
    const stoppedAgain = await retried(() =>
      json("POST", "/terraform/v1/hooks/srs/stopRecording", { room_name: "again" }, apiKey),
    );
    expect(stoppedAgain.status).toBe(200);

    // Every acknowledged message stored once, and nothing stored twice; no push went unanswered.
    expect(unanswered).toEqual([]);
    const rooms = await db.select({ id: chatRooms.id }).from(chatRooms).where(eq(chatRooms.accountId, accountId));
    const stored = await db
      .select({ content: chatMessages.content })
      .from(chatMessages)
      .where(
        inArray(
          chatMessages.roomId,
          rooms.map((room) => room.id),
        ),
      );
    const contents = stored.map((row) => row.content).filter((content) => content.startsWith("m"));
    expect(contents.length).toBe(new Set(contents).size);
    expect([...contents].sort()).toEqual([...acknowledged].sort());
    expect(acknowledged.length).toBeGreaterThan(10);

    // Every child that ran before the outage still runs: none died and was restarted.
    expect(childPids(supervisor.pid)).toEqual(before);
    expect(readFileSync(join(dir, "parley.log"), "utf8")).not.toContain("child exited");
    console.log(
      JSON.stringify({
        slowestDuringOutageMs: slowest,
        lateOnceDuringOutage: timedOut,
        slowestUnderLoadMs: Math.max(...seen.map((answer) => answer.ms)),
        lateJoinMs: joinMs,
        answersUnderLoad: seen.length,
        acknowledged: acknowledged.length,
        allBackAfterRedisStartMs: backMs,
        outageMs: restartedAt - killedAt,
      }),
    );
  }, 90_000);

  test("SIGTERM exits promptly while Redis is down", async () => {
    const socket = connect(base.replace("http", "ws"), token);
    sockets.push(socket);
    await joinChannel(socket.channel("chat:faults", {}));
    await redis.kill();
    expect(await redisSeenDown(base)).toMatchObject({ redis: "down" });
    // /readyz shows the API's connection gone; the workers' connections notice on their own, and
    // this test is about an outage they all know of (a stop in its first instant is not covered).
    await Bun.sleep(1_000);
    const started = Date.now();
    supervisor.kill("SIGTERM");
    const code = await Promise.race([supervisor.exited, Bun.sleep(10_000).then(() => "still running" as const)]);
    const ms = Date.now() - started;
    console.log(JSON.stringify({ sigtermExitMs: ms, code }));
    expect(code).toBe(0);
    // Far below the grace period (SHUTDOWN_GRACE_MS, 10 s): nothing waited on Redis.
    expect(ms).toBeLessThan(3_000);
  }, 30_000);
});
