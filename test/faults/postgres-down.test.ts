/**
 * PostgreSQL killed under load, with every role running as its own process: routes answer
 * 503 dependency_down with Retry-After (never 500), the socket replies dependency_down,
 * /readyz names the database, no process dies, and all is well once PostgreSQL is back: a
 * phone call the caller hung up during the outage has its end stored and told once.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Socket } from "phoenix";
import pg from "postgres";
import { ROLES } from "../../src/process/roles";
import { connect, disconnect, join as joinChannel, push } from "../support/phoenix";
import { freePort } from "../support/ports";
import { type PrivatePostgres, startPrivatePostgres } from "../support/private-postgres";
import { type Answer, ask, DOMAIN, freshFetch, nextSerial, routeSweep } from "../support/route-sweep";
import { runSipp } from "../support/sipp";
import { childPids, until } from "../support/wait";

const entry = new URL("../../src/index.ts", import.meta.url).pathname;
/**
 * An answer slower than this counts as none: an outage must be reported, not waited out. A query
 * caught by a connection attempt that began as PostgreSQL died waits out that attempt's
 * connect_timeout (5 s, src/db/client.ts) before its 503, so the bound is that and three seconds
 * for a machine running two suites (one second was overrun there); the driver's own defaults would
 * hold it 20–30 s.
 */
const ANSWER_WITHIN_MS = 8_000;
const fresh = freshFetch(ANSWER_WITHIN_MS);
/** The period of the workers' sweeps, reconciliations and lost-gateway looks in this test. */
const PERIOD_MS = 1_000;
/**
 * How long a silent recorder worker or gateway counts as alive here: the soak below crosses their
 * reconciliations, and a beat late on a busy machine (two suites at once) declares nothing lost.
 */
const LOST_MS = 3_000;
/**
 * How long the phone call lasts from its answer: it is answered before the kill, which follows
 * once its record shows the answer (a write behind the signalling), and the caller hangs up
 * during the outage, which lasts at least 6 s from the kill.
 */
const CALL_HOLD_MS = 4_000;

describe("PostgreSQL down", () => {
  let postgres: PrivatePostgres;
  let supervisor: ReturnType<typeof Bun.spawn>;
  let dir: string;
  let base: string;
  let apiKey: string;
  let accountId: string;
  let token: string;
  let sipPort: number;
  let socket: Socket | undefined;

  const { json, routes } = routeSweep(fresh, () => ({ base, apiKey, accountId, token }));
  /** One request to each kind of route: REST with API key, with token, Prosody's, the public mapper, usage, tokens. */
  const requests = {
    ...routes,
    "prosody conference": () =>
      fresh(`${base}/api/v1/scheduler/conference`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded", authorization: apiKey },
        body: `name=room${nextSerial()}&start_time=2030-01-15T10:00:00.000Z&mail_owner=u@${DOMAIN}`,
      }),
  };
  const sweep = () => ask(requests);

  /** Every role in its own process (WORKER_PROCESSES=per-role); the log goes to files in `dir`. */
  async function startSupervisor(port: number, logName: string, sip: number) {
    return Bun.spawn([process.execPath, entry], {
      env: {
        ...process.env,
        DATABASE_URL: postgres.url,
        PORT: String(port),
        HOST: "127.0.0.1",
        API_PROCESSES: "2",
        WORKER_PROCESSES: "per-role",
        DATA_DIR: dir,
        BOOTSTRAP_ACCOUNT: "true",
        LOG_LEVEL: "warn",
        SHUTDOWN_GRACE_MS: "2000",
        SIP_UDP_PORT: String(sip),
        SIP_TCP_PORT: String(await freePort()),
        REDIS_PREFIX: `parley-test-pgdown-${crypto.randomUUID()}`,
        // The workers' periodic database work, every second or three here (30 s, 5 s, 10 s and
        // 5 s by default), so the outage below crosses several runs of each.
        USAGE_SWEEP_INTERVAL_MS: String(PERIOD_MS),
        WEBHOOK_SWEEP_INTERVAL_MS: String(PERIOD_MS),
        STREAMING_RECORDER_LOST_MS: String(LOST_MS),
        SIP_GATEWAY_LOST_MS: String(LOST_MS),
      },
      stdout: Bun.file(join(dir, `${logName}.log`)),
      stderr: Bun.file(join(dir, `${logName}.err`)),
    });
  }

  beforeAll(async () => {
    postgres = await startPrivatePostgres();
    dir = mkdtempSync(join(tmpdir(), "parley-pgdown-"));
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    sipPort = await freePort();
    supervisor = await startSupervisor(port, "parley", sipPort);
    apiKey = await until(
      async () => {
        const ready = await fresh(`${base}/readyz`).then(
          (r) => r.ok,
          () => false,
        );
        return ready
          ? await Bun.file(join(dir, "first-api-key"))
              .text()
              .then(
                (text) => text.trim(),
                () => "",
              )
          : "";
      },
      Boolean,
      // Every role in a process of its own: seconds on an idle machine, many more on one running two suites.
      60_000,
      200,
    );
    expect(apiKey).toStartWith("prl_");
    const created = await json(
      "POST",
      "/api/v1/misc/generate-token",
      { apiKey, user: { id: "alice", name: "Alice" }, scope: "messaging" },
      "",
    );
    token = ((await created.json()) as { token: string }).token;
    accountId = JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString()).sub;
    const room = await json("POST", "/api/v1/messaging/rooms/create", { channel_id: "faults" }, `Bearer ${token}`);
    expect(room.status).toBe(201);
  }, 120_000);

  afterAll(async () => {
    if (socket) await disconnect(socket).catch(() => {});
    supervisor?.kill("SIGKILL");
    await supervisor?.exited;
    postgres?.destroy();
    rmSync(dir, { recursive: true, force: true });
  });

  test("routes answer 503 with Retry-After, no process dies, and service resumes", async () => {
    const before = await until(
      () => childPids(supervisor.pid),
      (pids) => pids.length === Object.keys(ROLES).length + 1,
      15_000,
    );
    expect(before).toHaveLength(Object.keys(ROLES).length + 1);

    const healthy = await sweep();
    expect(healthy.filter((answer) => answer.status >= 300)).toEqual([]);

    socket = connect(base.replace("http", "ws"), token);
    const channel = socket.channel("chat:faults", {});
    await joinChannel(channel);
    expect((await push(channel, "new_message", { content: "before" })).status).toBe("ok");

    // Load keeps flowing while PostgreSQL dies: some requests are cut mid-query.
    let loading = true;
    const seen: Answer[] = [];
    const load = (async () => {
      while (loading) seen.push(...(await sweep()));
    })();
    expect(
      await until(
        () => seen.length,
        (n) => n > 0,
        15_000,
        20,
      ),
    ).toBeGreaterThan(0);

    // A phone call, answered and recorded so, that the caller hangs up while PostgreSQL is down.
    const mapping = await fresh(`${base}/api/v1/conference-mapper/conferenceMapper?conference=pgdown-call@${DOMAIN}`, {
      headers: { authorization: apiKey },
    });
    const mapperId = ((await mapping.json()) as { id: number }).id;
    const cid = crypto.randomUUID();
    const callId = `${cid}-1`;
    const phone = runSipp({
      scenario: "call.xml",
      port: sipPort,
      service: "gateway",
      keys: { cid, extra_header: `Parley-Conference-Room: ${mapperId}` },
      holdMs: CALL_HOLD_MS,
      timeoutSeconds: 30,
    });
    const direct = pg(postgres.url, { max: 1, onnotice: () => {} });
    const callRecord = () =>
      direct<{ answered_at: Date | null; ended_at: Date | null; reason: string | null }[]>`
        select answered_at, ended_at, reason from sip_calls where call_id = ${callId}`;
    const answered = await until(callRecord, (rows) => rows[0]?.answered_at != null, 15_000, 50);
    expect(answered[0]?.answered_at).toBeInstanceOf(Date);

    postgres.kill();
    const killedAt = Date.now();

    const down = await until(
      sweep,
      (answers) => answers.every((a) => a.status === 503 || (a.route === "generate-token" && a.status === 200)),
      15_000,
      200,
    );
    for (const answer of down.filter((a) => a.route !== "generate-token")) {
      expect(answer).toEqual({
        route: answer.route,
        status: 503,
        code: "dependency_down",
        retryAfter: "5",
        ms: answer.ms,
      });
    }
    const ready = await fresh(`${base}/readyz`);
    expect(ready.status).toBe(503);
    expect(await ready.json()).toMatchObject({ database: "down", redis: "ok" });

    const reply = await push(channel, "new_message", { content: "during" });
    expect(reply).toEqual({
      status: "error",
      response: expect.objectContaining({ reason: "dependency_down", retry_after: 5 }),
    });

    // A soak: the outage lasts long enough, from the kill, for several runs of each worker's sweeps (PERIOD_MS),
    // two reconciliations (LOST_MS) and a database connection attempt's connect_timeout (5 s) to hit it.
    await Bun.sleep(Math.max(0, killedAt + 6_000 - Date.now()));
    loading = false;
    await load;
    expect(seen.filter((answer) => answer.status === 0 || (answer.status >= 500 && answer.status !== 503))).toEqual([]);
    expect(
      seen.filter(
        (answer) => answer.status === 503 && (answer.code !== "dependency_down" || answer.retryAfter === null),
      ),
    ).toEqual([]);

    // The caller's BYE was answered during the outage: the call is over for the caller.
    const hungUp = await phone;
    expect(hungUp.code === 0 ? "" : hungUp.errors || hungUp.output.slice(-500)).toBe("");
    postgres.start();
    const startedAt = Date.now();
    const back = await until(sweep, (answers) => answers.every((a) => a.status < 300), 20_000, 250);
    expect(back.filter((answer) => answer.status >= 300)).toEqual([]);
    expect((await fresh(`${base}/readyz`)).status).toBe(200);
    expect((await push(channel, "new_message", { content: "after" })).status).toBe("ok");

    // The call's end, which the gateway could not write during the outage, is stored as the caller
    // ended it (at that moment, not when it was written) and told once.
    const [ended] = await until(callRecord, (rows) => rows[0]?.ended_at != null, 15_000, 100);
    await direct.end();
    expect(ended?.reason).toBe("caller_bye");
    expect(ended!.ended_at!.getTime()).toBeGreaterThan(killedAt);
    expect(ended!.ended_at!.getTime()).toBeLessThan(startedAt);
    const callEnded = async () => {
      const answer = await fresh(`${base}/api/v1/events?after=0&types=call.ended`, {
        headers: { authorization: `Bearer ${apiKey}` },
      });
      const body = (await answer.json()) as { events: Array<{ data: { call_id: string; reason: string } }> };
      return body.events.filter((event) => event.data.call_id === callId);
    };
    const told = await until(callEnded, (events) => events.length > 0, 15_000, 200);
    expect(told.map((event) => event.data.reason)).toEqual(["caller_bye"]);

    // Every child that ran before the outage still runs: none died and was restarted.
    expect(childPids(supervisor.pid)).toEqual(before);
    expect(readFileSync(join(dir, "parley.log"), "utf8")).not.toContain("child exited");
  }, 90_000);

  test("a supervisor started while PostgreSQL is down waits for it, then serves", async () => {
    postgres.kill();
    const port = await freePort();
    const late = await startSupervisor(port, "late", await freePort());
    try {
      const log = join(dir, "late.log");
      const said = () => (existsSync(log) ? readFileSync(log, "utf8") : "");
      const waiting = await until(said, (text) => text.includes("waiting for the database"), 20_000, 100);
      expect(waiting).toContain("waiting for the database");
      expect(late.exitCode).toBeNull();
      postgres.start();
      // Its next attempt comes within a second; then migrations and every role's start, slow on a loaded machine.
      const readyz = () =>
        fresh(`http://127.0.0.1:${port}/readyz`).then(
          (r) => r.status,
          () => 0,
        );
      const ready = await until(readyz, (status) => status === 200, 45_000, 200);
      expect(ready).toBe(200);
      const token = await fresh(`http://127.0.0.1:${port}/api/v1/misc/generate-token`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ apiKey, user: { id: "carol" } }),
      });
      expect(token.status).toBe(200);
    } finally {
      late.kill("SIGKILL");
      await late.exited;
    }
  }, 90_000);
});
