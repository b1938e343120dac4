/**
 * The streaming control plane against real PostgreSQL, Redis, BullMQ and a real recorder
 * process (the command driver running a small shell recorder). Media output itself is
 * proven in test/workers/recorder.test.ts with nginx-rtmp and ffmpeg.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { and, eq } from "drizzle-orm";
import { config, overrideConfig } from "../../src/core/config";
import { db } from "../../src/db/client";
import { conferenceEvents } from "../../src/modules/conference-log/schema";
import { appendEvent } from "../../src/modules/conference-log/service";
import { streamCost } from "../../src/modules/streaming/cost";
import { optionsOf } from "../../src/modules/streaming/request";
import { streams } from "../../src/modules/streaming/schema";
import { getQueue, QUEUE_NAMES } from "../../src/queue/queues";
import { stopStateSubscriber } from "../../src/modules/streaming/state";
import { type RecorderWorker, startRecorderWorker } from "../../workers/recorder";
import { commandDriver } from "../../workers/recorder/command";
import { call, newAccount } from "../helpers";
import { isAlive as alive, until } from "../support/wait";

const out = mkdtempSync(join(tmpdir(), "parley-recorder-"));
// A stand-in recorder: writes its settings down, says it publishes, then runs until stopped.
// A room named "slow-*" never gets ready; a room named "crash-*" dies a moment after starting.
const RECORDER = `
env | grep '^PARLEY_' > "${out}/$PARLEY_STREAM_NAME.env"
printf '%s' "$PARLEY_DESTINATIONS" > "${out}/$PARLEY_STREAM_NAME.destinations"
case "$PARLEY_ROOM" in slow-*) exec sleep 60 ;; esac
echo ready
case "$PARLEY_ROOM" in crash-*) sleep 0.5; exit 3 ;; esac
exec sleep 60`;

let worker: RecorderWorker;
let account: Awaited<ReturnType<typeof newAccount>>;
let restoreConfig: () => void;

const auth = () => ({ authorization: `Bearer ${account.apiKey}` });
const start = (body: unknown, headers = auth()) =>
  call("POST", "/terraform/v1/hooks/srs/startRecording", { body, headers });
const stop = (room_name: string) =>
  call("POST", "/terraform/v1/hooks/srs/stopRecording", { body: { room_name }, headers: auth() });
const row = async (streamName: string) =>
  (await db.select().from(streams).where(eq(streams.streamName, streamName)))[0]!;

beforeAll(async () => {
  restoreConfig = overrideConfig({
    streaming: {
      destinationHosts: ["*.allowed.example", "live.example.org"],
      callbackSecret: "callback-secret",
      callbackAddresses: [],
      recordingDir: join(out, "recordings"),
    },
  });
  account = await newAccount();
  worker = await startRecorderWorker(commandDriver(RECORDER));
});

afterAll(async () => {
  await worker.stop();
  await stopStateSubscriber();
  restoreConfig();
});

test("a stream's cost follows what it asks for, as docs/streaming.md's table says", () => {
  const cost = (request: Record<string, unknown>) => streamCost(optionsOf({ room_name: "r", ...request }));
  expect(cost({})).toBe(30);
  expect(cost({ audio_only: true })).toBe(5);
  expect(cost({ codec: "H265" })).toBe(30);
  expect(cost({ codec: "H265", is_recording: true })).toBe(81);
  expect(cost({ multi_bitrate: true })).toBe(78);
  expect(cost({ multi_bitrate: true, is_low_latency: true, is_recording: true })).toBe(89);
});

describe("start and stop", () => {
  test("start answers every field, the recorder gets its settings, stop ends it", async () => {
    const started = await start({
      room_name: "Weekly@conference.example.com",
      stream_keys: [{ key: "YouTube", value: "yt-secret-key" }],
      stream_urls: ["rtmps://ingest.allowed.example/app/url-secret-key"],
      is_recording: true,
      is_vod: true,
      is_low_latency: true,
      layout: "mobile",
      profile: "HD",
      username: true,
      reconnect_window: "12000",
    });
    expect(started.status).toBe(200);
    const body = started.body;
    expect(body).toMatchObject({ started: true, pod_name: worker.podName });
    expect(body.stream_name).toMatch(/^weekly-[0-9a-f]{32}$/);
    for (const field of ["hls_url", "low_latency_hls_url", "vod_url", "rtmp_url", "flv_url"])
      expect(body[field]).toContain(body.stream_name);
    expect(body.hls_url).toBe(`${config.streaming.hlsBaseUrl}/${body.stream_name}.m3u8`);
    expect(body.rtmp_url).toBe(`${config.streaming.rtmpBaseUrl}/${body.stream_name}`);
    expect(JSON.stringify(body)).not.toContain("secret-key");

    const env = readFileSync(join(out, `${body.stream_name}.env`), "utf8");
    expect(env).toContain("PARLEY_ROOM=weekly");
    expect(readFileSync(join(out, `${body.stream_name}.destinations`), "utf8").split("\n")).toEqual([
      "rtmp://a.rtmp.youtube.com/live2/yt-secret-key",
      "rtmps://ingest.allowed.example/app/url-secret-key",
    ]);
    expect(env).toContain("PARLEY_LAYOUT=mobile");
    expect(env).toContain("PARLEY_PROFILE=HD");
    expect(env).toContain("PARLEY_USERNAME=true");
    expect(env).toContain("PARLEY_RECONNECT_WINDOW_MS=120000");
    const running = await row(body.stream_name);
    expect(running.state).toBe("running");
    expect(JSON.stringify(running)).not.toContain("secret-key");
    // The job that carried the keys leaves Redis as it completes.
    const jobGone = await until(
      async () => (await (await getQueue(QUEUE_NAMES.recorder)).getJob(`start-${running.id}`)) === undefined,
      (gone) => gone,
    );
    expect(jobGone).toBe(true);
    expect(alive(running.pid!)).toBe(true);

    const stopped = await stop("weekly");
    expect(stopped.status).toBe(200);
    expect(stopped.body).toEqual({ started: false, stream_name: body.stream_name, pod_name: worker.podName });
    const finished = await row(body.stream_name);
    expect(finished).toMatchObject({ state: "stopped", reason: "requested" });
    expect(alive(running.pid!)).toBe(false);

    const kinds = await db
      .select({
        kind: conferenceEvents.kind,
        room: conferenceEvents.room,
        subject: conferenceEvents.subject,
        payload: conferenceEvents.payload,
      })
      .from(conferenceEvents)
      .where(and(eq(conferenceEvents.accountId, account.accountId), eq(conferenceEvents.subject, body.stream_name)));
    expect(kinds.map((k) => k.kind).sort()).toEqual([
      "recording_started",
      "recording_stopped",
      "stream_started",
      "stream_stopped",
    ]);
    expect(kinds.every((k) => k.room === "weekly")).toBe(true);
    expect(kinds.find((k) => k.kind === "stream_started")!.payload).toEqual({ recording: true });
  });

  test("a room typed with a space is the room jitsi-meet names: its room key", async () => {
    const started = await start({ room_name: "Design Review@conference.example.com" });
    expect(started.status).toBe(200);
    expect(await start({ room_name: "design%20review" })).toMatchObject({
      body: { stream_name: started.body.stream_name },
    });
    expect((await row(started.body.stream_name)).room).toBe("design%20review");
    expect((await stop("design review")).status).toBe(200);
  });

  test("a second start, even at the same moment, answers the one running stream", async () => {
    const [first, second] = await Promise.all([start({ room_name: "twice" }), start({ room_name: "twice" })]);
    expect(first.status).toBe(200);
    expect(second.status).toBe(200);
    expect(second.body.stream_name).toBe(first.body.stream_name);
    const third = await start({ room_name: "TWICE" });
    expect(third.body.stream_name).toBe(first.body.stream_name);
    expect(
      (
        await db
          .select()
          .from(streams)
          .where(and(eq(streams.accountId, account.accountId), eq(streams.room, "twice")))
      ).length,
    ).toBe(1);
    expect((await stop("twice")).status).toBe(200);
    // Once stopped, the room can stream again, as a new stream.
    const again = await start({ room_name: "twice" });
    expect(again.status).toBe(200);
    expect(again.body.stream_name).not.toBe(first.body.stream_name);
    await stop("twice");
  });

  test("a recorder that is not ready in time answers started:false with timeout, and is cleaned up", async () => {
    // The shortest there is: this recorder is never ready, however long it is waited for.
    const restore = overrideConfig({ streaming: { operationTimeoutMs: 1_000 } });
    try {
      const answer = await start({ room_name: "slow-room" });
      expect(answer.status).toBe(504);
      expect(answer.body.started).toBe(false);
      expect(answer.body.error.code).toBe("timeout");
      const [failed] = await db
        .select()
        .from(streams)
        .where(and(eq(streams.accountId, account.accountId), eq(streams.room, "slow-room")));
      expect(failed).toMatchObject({ state: "failed", reason: "timeout" });
      await until(
        async () => worker.active(),
        (active) => active.length === 0,
      );
      expect(alive(failed!.pid!)).toBe(false);
    } finally {
      restore();
    }
  }, 15_000);

  test("a recorder that dies marks its stream failed with the reason", async () => {
    const answer = await start({ room_name: "crash-room" });
    expect(answer.status).toBe(200);
    const failed = await until(
      () => row(answer.body.stream_name),
      (stream) => stream.state === "failed",
    );
    expect(failed.reason).toBe("recorder_exited: exited with code 3");
    expect((await stop("crash-room")).status).toBe(404);
  });

  test("the stream stops a reconnect window after the room's last participant left", async () => {
    const answer = await start({ room_name: "emptying", reconnect_window: 30 });
    expect(answer.status).toBe(200);
    const event = (kind: "occupant_joined" | "occupant_left", subject: string) =>
      appendEvent({
        accountId: account.accountId,
        kind,
        room: "emptying",
        occurredAt: new Date(),
        subject,
        dedupeKey: `${kind}:${subject}:${Date.now()}`,
      });
    await event("occupant_joined", "alice");
    await event("occupant_joined", "bob");
    await event("occupant_left", "alice");
    // Two reconnect windows (30 × 10 ms) with bob still there: had a countdown started, it would have run out.
    await Bun.sleep(600);
    expect((await row(answer.body.stream_name)).state).toBe("running");
    await event("occupant_left", "bob");
    const stopped = await until(
      () => row(answer.body.stream_name),
      (stream) => stream.state === "stopped",
    );
    expect(stopped.reason).toBe("room_empty");
  });

  test("admission counts cost units, not streams: a cheap stream fits where a costly one is queued", async () => {
    // One video stream with audio (30 units) and one audio-only stream (5) fit in 40; a second video one does not.
    const restore = overrideConfig({ streaming: { capacity: 10, workerUnits: 40 } });
    try {
      expect((await start({ room_name: "units-video" })).status).toBe(200);
      expect((await start({ room_name: "units-audio", audio_only: true })).status).toBe(200);
      const waiting = await start({ room_name: "units-second-video" });
      expect(waiting.status).toBe(202);
      expect(worker.active().length).toBe(2);
      expect((await stop("units-video")).status).toBe(200);
      await until(
        () => row(waiting.body.stream_name),
        (stream) => stream.state === "running",
      );
      for (const room of ["units-audio", "units-second-video"]) expect((await stop(room)).status).toBe(200);
    } finally {
      restore();
    }
  }, 15_000);

  test("a start no worker has room for is queued at once, starts once room frees, leaves on a stop", async () => {
    const restore = overrideConfig({ streaming: { capacity: 1 } });
    try {
      expect((await start({ room_name: "first-of-one" })).status).toBe(200);
      const sent = Date.now();
      const queued = await start({ room_name: "second-of-one", stream_keys: [{ key: "youtube", value: "q-key" }] });
      // Answered at once, not after the operation timeout.
      expect(Date.now() - sent).toBeLessThan(5_000);
      expect(queued.status).toBe(202);
      expect(queued.body).toMatchObject({ started: false, queued: true, position: 1 });
      expect(queued.body.estimated_start_s).toBeGreaterThan(0);
      const second = await row(queued.body.stream_name);
      expect(second.state).toBe("queued");
      // The keys wait sealed, never in plain text.
      expect(JSON.stringify(second)).not.toContain("q-key");
      // A start behind it is second in line; the same room again answers the queued stream.
      const third = await start({ room_name: "third-of-one" });
      expect(third.body).toMatchObject({ queued: true, position: 2 });
      expect((await start({ room_name: "second-of-one" })).body).toMatchObject({ position: 1 });
      // A stop takes a queued stream out of the queue.
      expect((await stop("third-of-one")).status).toBe(200);
      expect(await row(third.body.stream_name)).toMatchObject({ state: "stopped", reason: "requested" });

      expect((await stop("first-of-one")).status).toBe(200);
      const freed = Date.now();
      const running = await until(
        () => row(queued.body.stream_name),
        (stream) => stream.state === "running",
      );
      expect(running.startedAt!.getTime() - freed).toBeLessThan(2_000);
      expect(readFileSync(join(out, `${running.streamName}.destinations`), "utf8")).toBe(
        "rtmp://a.rtmp.youtube.com/live2/q-key",
      );
      expect(running.queuedDestinations).toBeNull();
      const events = await call("GET", "/api/v1/events?limit=1000&types=stream.queued,stream.started", {
        headers: auth(),
      });
      const mine = (events.body.events as any[]).filter((event) => event.data.stream_name === running.streamName);
      expect(mine.map((event) => event.type)).toEqual(["stream.queued", "stream.started"]);
      expect(mine[0].data).toMatchObject({ room: "second-of-one", position: 1 });
      expect((await stop("second-of-one")).status).toBe(200);
      expect(worker.active()).toEqual([]);
    } finally {
      restore();
    }
  }, 20_000);

  test("with two workers, every stop reaches the stream's own worker, whichever worker takes the job", async () => {
    const restore = overrideConfig({ streaming: { podName: `${config.streaming.podName}-second` } });
    const second = await startRecorderWorker(commandDriver(RECORDER));
    restore();
    try {
      const rooms = ["pair-a", "pair-b", "pair-c", "pair-d", "pair-e", "pair-f"];
      const started = await Promise.all(rooms.map((room) => start({ room_name: room })));
      expect(started.map((answer) => answer.status)).toEqual(rooms.map(() => 200));
      for (const answer of started) expect([worker.podName, second.podName]).toContain(answer.body.pod_name);
      expect(worker.active().length + second.active().length).toBe(rooms.length);
      for (const room of rooms) expect((await stop(room)).status).toBe(200);
      expect(worker.active()).toEqual([]);
      expect(second.active()).toEqual([]);
    } finally {
      await second.stop();
    }
  }, 20_000);

  test("another account cannot stop the stream", async () => {
    const answer = await start({ room_name: "mine" });
    const other = await newAccount();
    const foreign = await call("POST", "/terraform/v1/hooks/srs/stopRecording", {
      body: { room_name: "mine" },
      headers: { authorization: other.apiKey },
    });
    expect(foreign.status).toBe(404);
    expect((await row(answer.body.stream_name)).state).toBe("running");
    await stop("mine");
  });
});

describe("bad requests are 4xx with the error shape", () => {
  const cases: [string, unknown, number][] = [
    ["no room_name", {}, 400],
    ["room_name not a string", { room_name: 5 }, 400],
    ["empty room_name", { room_name: "" }, 400],
    ["room_name with a NUL", { room_name: "a\u0000b" }, 400],
    ["room_name with a tab", { room_name: "a\tb" }, 400],
    ["room_name only a domain", { room_name: "@conference.example.com" }, 422],
    ["stream_keys not an array", { room_name: "r", stream_keys: "youtube" }, 400],
    ["stream_keys entry without value", { room_name: "r", stream_keys: [{ key: "youtube" }] }, 400],
    ["unknown platform", { room_name: "r", stream_keys: [{ key: "myspace", value: "k" }] }, 422],
    ["stream key with tee syntax", { room_name: "r", stream_keys: [{ key: "twitch", value: "a|b" }] }, 422],
    ["stream_urls not rtmp", { room_name: "r", stream_urls: ["https://live.example.org/app/k"] }, 422],
    ["stream_urls host not allowed", { room_name: "r", stream_urls: ["rtmp://evil.example.net/app/k"] }, 422],
    ["stream_urls not a URL", { room_name: "r", stream_urls: ["nonsense"] }, 422],
    ["unknown codec", { room_name: "r", codec: "VP9" }, 422],
    ["unknown layout", { room_name: "r", layout: "tv" }, 422],
    ["unknown profile", { room_name: "r", profile: "4K" }, 422],
    ["reconnect_window not a number", { room_name: "r", reconnect_window: "soon" }, 422],
    ["reconnect_window negative", { room_name: "r", reconnect_window: -1 }, 400],
    ["is_recording not a boolean", { room_name: "r", is_recording: "yes" }, 400],
    ["audio_only with multi_bitrate", { room_name: "r", audio_only: true, multi_bitrate: true }, 422],
  ];
  for (const [name, body, status] of cases) {
    test(name, async () => {
      const answer = await start(body);
      expect(answer.status).toBe(status);
      expect(typeof answer.body.error.code).toBe("string");
    });
  }

  test("an unknown platform lists the known ones, without echoing the key", async () => {
    const answer = await start({ room_name: "r", stream_keys: [{ key: "myspace", value: "hidden-key" }] });
    expect(answer.body.error.message).toContain("youtube, youtube_backup, facebook");
    expect(answer.body.error.message).toContain("twitch");
    expect(JSON.stringify(answer.body)).not.toContain("hidden-key");
  });

  test("a URL outside the allow-list names its host, not its key", async () => {
    const answer = await start({ room_name: "r", stream_urls: ["rtmp://evil.example.net/app/hidden-key"] });
    expect(answer.body.error.message).toContain("evil.example.net");
    expect(JSON.stringify(answer.body)).not.toContain("hidden-key");
  });

  test("no API key is 401, malformed JSON is 400, stop of an unknown room is 404", async () => {
    expect((await start({ room_name: "r" }, { authorization: "" })).status).toBe(401);
    expect((await start({ room_name: "r" }, { authorization: "Bearer nope" })).status).toBe(401);
    const broken = await call("POST", "/terraform/v1/hooks/srs/startRecording", {
      raw: "{room_name:",
      headers: { ...auth(), "content-type": "application/json" },
    });
    expect(broken.status).toBe(400);
    expect((await call("POST", "/terraform/v1/hooks/srs/stopRecording", { body: {}, headers: auth() })).status).toBe(
      400,
    );
    expect((await stop("nowhere")).status).toBe(404);
  });
});

describe("media-server callbacks and viewer counts", () => {
  const hook = (name: string, body: Record<string, unknown>, secret = "callback-secret", form = false) =>
    call("POST", `/terraform/v1/hooks/srs/${name}?secret=${secret}`, {
      raw: form ? new URLSearchParams(body as Record<string, string>).toString() : JSON.stringify(body),
      headers: { "content-type": form ? "application/x-www-form-urlencoded" : "application/json" },
    });
  const count = (name: string, prefix = "/terraform") =>
    call("GET", `${prefix}/v1/hooks/srs/live/viewers/count/${name}`);

  test("SRS JSON and nginx-rtmp form callbacks move the count, and the secret is required", async () => {
    const answer = await start({ room_name: "watched" });
    const name = answer.body.stream_name as string;
    expect(
      (await hook("on_play", { action: "on_play", app: "live", stream: name, client_id: "a1" }, "wrong")).status,
    ).toBe(403);

    const srsPlay = await hook("on_play", { action: "on_play", app: "live", stream: name, client_id: "a1" });
    expect(srsPlay.status).toBe(200);
    expect(srsPlay.body).toEqual({ code: 0 });
    expect((await hook("on_play", { call: "play", app: "live", name, clientid: "7" }, undefined, true)).status).toBe(
      200,
    );
    expect((await count(name)).body).toMatchObject({ [name]: { current_viewers: 2 } });
    expect((await count(name, "/llhls")).body[name].current_viewers).toBe(2);

    // A repeated delivery changes nothing; a publisher's on_done is not a viewer leaving.
    await hook("on_play", { call: "play", app: "live", name, clientid: "7" }, undefined, true);
    await hook("on_done", { call: "done", app: "live", name, clientid: "99" }, undefined, true);
    expect((await count(name)).body[name].current_viewers).toBe(2);

    await hook("on_stop", { action: "on_stop", app: "live", stream: name, client_id: "a1" });
    await hook("on_done", { call: "done", app: "live", name, clientid: "7" }, undefined, true);
    const after = (await count(name)).body[name];
    expect(after.current_viewers).toBe(0);
    expect(Number.isInteger(after.uptime)).toBe(true);

    const viewerEvents = await db
      .select({ payload: conferenceEvents.payload })
      .from(conferenceEvents)
      .where(and(eq(conferenceEvents.kind, "viewers_changed"), eq(conferenceEvents.subject, name)))
      .orderBy(conferenceEvents.id);
    expect(viewerEvents.map((e) => e.payload.viewers)).toEqual([1, 2, 1, 0]);
    await stop("watched");
    const stopped = await db
      .select({ payload: conferenceEvents.payload })
      .from(conferenceEvents)
      .where(and(eq(conferenceEvents.kind, "stream_stopped"), eq(conferenceEvents.subject, name)));
    expect(stopped[0]!.payload.peak_viewers).toBe(2);
  });

  test("publishing is allowed only under a live stream's names", async () => {
    expect((await hook("on_publish", { call: "publish", app: "live", name: "made-up" }, undefined, true)).status).toBe(
      403,
    );
    const answer = await start({ room_name: "publishing" });
    const name = answer.body.stream_name as string;
    expect((await hook("on_publish", { call: "publish", app: "live", name }, undefined, true)).status).toBe(200);
    expect(
      (await hook("on_publish", { call: "publish", app: "live", name: `${name}_480p1128` }, undefined, true)).status,
    ).toBe(200);
    // While a stop is under way (and may yet be refused) the recorder may still publish.
    await db.update(streams).set({ state: "stopping" }).where(eq(streams.streamName, name));
    expect((await hook("on_publish", { call: "publish", app: "live", name }, undefined, true)).status).toBe(200);
    await db.update(streams).set({ state: "running" }).where(eq(streams.streamName, name));
    await stop("publishing");
    expect((await hook("on_publish", { call: "publish", app: "live", name }, undefined, true)).status).toBe(403);
  });

  test("unknown streams are 404, unknown callbacks 4xx", async () => {
    expect((await count("no-such-stream")).status).toBe(404);
    expect((await count("no-such-stream", "/llhls")).status).toBe(404);
    expect((await hook("on_play", { action: "on_play", stream: "no-such-stream", client_id: "1" })).status).toBe(404);
    expect((await hook("on_dance", { action: "on_dance" })).status).toBeGreaterThanOrEqual(400);
    expect((await call("GET", "/vod/v1/no-such-stream.mp4")).status).toBe(404);
    expect((await call("GET", "/vod/v1/%00.mp4")).status).toBe(400);
    expect((await count("bad%00name")).status).toBe(400);
    expect((await hook("on_play", { action: "on_play", stream: "bad\u0000name", client_id: "1" })).status).toBe(400);
    expect(
      (await call("POST", "/terraform/v1/hooks/srs/stopRecording", { body: { room_name: "a\u0000" }, headers: auth() }))
        .status,
    ).toBe(400);
  });

  test("without a secret, callbacks are held to the address allow-list", async () => {
    const restore = overrideConfig({ streaming: { callbackSecret: undefined, callbackAddresses: ["127.0.0.1"] } });
    try {
      // In-process requests have no peer address, so they are not on the list.
      expect((await hook("on_play", { action: "on_play", stream: "x", client_id: "1" }, "")).status).toBe(403);
    } finally {
      restore();
    }
  });
});

test("recordings directory is made by the worker", () => {
  expect(existsSync(join(out, "recordings"))).toBe(true);
});
