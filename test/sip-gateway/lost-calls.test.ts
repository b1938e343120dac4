/**
 * A gateway process killed mid-call never writes the call's end; another gateway notices its
 * heartbeat stopped and ends the call at the last beat, so the phone minutes stop there
 * instead of running on until the report is read, and tells it (call.ended) as any end is. A lost
 * call whose end cannot be written does not hold back the others.
 */
import { afterAll, expect, test } from "bun:test";
import { hostname } from "node:os";
import { and, eq, sql } from "drizzle-orm";
import { db } from "../../src/db/client";
import { conferenceEvents } from "../../src/modules/conference-log/schema";
import { mapperIdFor } from "../../src/modules/mapper/service";
import { redis, redisKey } from "../../src/queue/connection";
import { callsById } from "../../sip-gateway/call-log";
import { lostTimers } from "../../sip-gateway/lost-calls";
import { sipCalls } from "../../sip-gateway/schema";
import { call, newAccount } from "../helpers";
import { foldQueued } from "../support/cdr-worker";
import { freePort, udpBound } from "../support/ports";
import { runSipp } from "../support/sipp";
import { until } from "../support/wait";

const entry = new URL("../../src/index.ts", import.meta.url).pathname;
/**
 * SIP_GATEWAY_LOST_MS of the gateways, half the default: the wait for the lost call's end is this
 * period's (its first reconciliation waits for a whole one of its own beats), and a beat late on a
 * busy machine (two suites at once) does not count a live gateway lost.
 */
const LOST_MS = 3_000;
const { heartbeatMs } = lostTimers({ lostAfterMs: LOST_MS });
const gateways: Array<ReturnType<typeof Bun.spawn>> = [];

/**
 * A sip role process as the supervisor starts it, on its own free port; resolves once it beats.
 * The port is chosen free for TCP and the gateway binds it for UDP too, where an RTP socket of
 * this machine (another suite's calls) may hold it: a gateway that exits at once is started
 * again on another port.
 */
async function startGateway() {
  for (let attempt = 1; ; attempt++) {
    let port = await freePort();
    while (udpBound(port)) port = await freePort();
    const child = Bun.spawn([process.execPath, entry, "--role=sip"], {
      env: {
        ...process.env,
        LOG_LEVEL: "silent",
        SIP_BIND_ADDRESS: "127.0.0.1",
        SIP_UDP_PORT: String(port),
        SIP_TCP_PORT: String(port),
        SIP_GATEWAY_LOST_MS: String(LOST_MS),
      },
      stdout: "ignore",
      stderr: "inherit",
    });
    gateways.push(child);
    const name = `${hostname()}-sip-${child.pid}`;
    // A process start: seconds on a machine running two suites.
    const beating = await until(
      async () => (child.exitCode !== null ? "exited" : await redis().hexists(redisKey("sip", "gateways"), name)),
      (found) => found === 1 || found === "exited",
      45_000,
      100,
    );
    if (beating === 1) return { child, port, name };
    if (beating !== "exited" || attempt === 3)
      throw new Error(`gateway ${name} never beat${beating === "exited" ? ` (it exited ${child.exitCode})` : ""}`);
  }
}

afterAll(() => {
  for (const child of gateways) child.kill("SIGKILL");
});

test("a call whose gateway is killed mid-call is ended at the gateway's last beat by another gateway", async () => {
  const account = await newAccount();
  const mapperId = await mapperIdFor(account.accountId, "cut@conference.example.com");
  const doomed = await startGateway();

  const sipp = runSipp({
    scenario: "call.xml",
    port: doomed.port,
    service: "gateway",
    keys: { extra_header: `Parley-Conference-Room: ${mapperId}` },
    holdMs: 3_000,
    timeoutSeconds: 6,
  });
  // The Call-ID is known only when sipp is done; find the call by its account instead.
  const answered = await until(
    () => db.select().from(sipCalls).where(eq(sipCalls.accountId, account.accountId)),
    (rows) => rows.length === 1 && rows[0]!.answeredAt !== null,
    10_000,
  );
  expect(answered[0]?.answeredAt).toBeInstanceOf(Date);
  expect(answered[0]?.gateway).toBe(doomed.name);
  const callId = answered[0]!.callId;

  doomed.child.kill("SIGKILL");
  const killedAt = Date.now();
  await doomed.child.exited;

  await startGateway();
  const [ended] = await until(
    () => callsById(callId),
    (rows) => rows[0]?.endedAt != null,
    25_000,
    200,
  );
  expect(ended).toMatchObject({ reason: "gateway_lost", gateway: doomed.name });
  // At its last beat: before the kill, by at most one beat interval (and a little scheduling slack).
  expect(ended!.endedAt!.getTime()).toBeLessThanOrEqual(killedAt);
  expect(ended!.endedAt!.getTime()).toBeGreaterThan(killedAt - heartbeatMs - 1_000);

  const events = await db
    .select({ kind: conferenceEvents.kind, payload: conferenceEvents.payload })
    .from(conferenceEvents)
    .where(and(eq(conferenceEvents.accountId, account.accountId), eq(conferenceEvents.subject, callId)));
  expect(events.map((event) => event.kind).sort()).toEqual(["call_ended", "call_started"]);
  expect(events.find((event) => event.kind === "call_ended")!.payload).toMatchObject({
    answered: true,
    reason: "gateway_lost",
  });

  // Told as any end is: one call.ended in the event log (and so to webhooks), reason gateway_lost.
  const told = await call("GET", "/api/v1/events?after=0&types=call.ended", {
    headers: { authorization: `Bearer ${account.apiKey}` },
  });
  expect(told.body.events.map((event: any) => event.data)).toEqual([
    expect.objectContaining({
      call_id: callId,
      reason: "gateway_lost",
      answered: true,
      ended_at: ended!.endedAt!.toISOString(),
    }),
  ]);

  await foldQueued();
  const report = await call("POST", "/api/v1/pricing/cdr", {
    body: { room_name: ["cut"] },
    headers: { authorization: `Bearer ${account.apiKey}` },
  });
  const billed = report.body.rooms[0].media_usage.calls.find((entry: any) => entry.call_id === callId);
  expect(billed.ended_at).toBe(ended!.endedAt!.toISOString());
  expect(billed.minutes).toBeLessThan(0.2);
  // sipp gives up on its BYE to the dead gateway on its own; only its exit is awaited.
  await sipp;
}, 150_000);

test("a lost call whose end cannot be written does not keep the lost calls after it open", async () => {
  // Two open calls of a gateway that stopped beating a minute ago; PostgreSQL refuses to end the first.
  const ghost = `ghost-sip-${crypto.randomUUID().slice(0, 8)}`;
  await redis().hset(redisKey("sip", "gateways"), ghost, String(Date.now() - 60_000));
  const open = { caller: "sip:ann@example.com", callee: "sip:room@example.com", transport: "udp", source: "127.0.0.1" };
  const [stuck, next] = await db
    .insert(sipCalls)
    .values([
      { ...open, callId: `${ghost}-stuck`, gateway: ghost },
      { ...open, callId: `${ghost}-next`, gateway: ghost },
    ])
    .returning();
  await db.execute(
    sql.raw(`
    create function refuse_stuck_end() returns trigger language plpgsql as $$
    begin
      if new.call_id = '${stuck!.callId}' and new.ended_at is not null then raise exception 'this end cannot be written'; end if;
      return new;
    end $$;
    create trigger refuse_stuck_end before update on sip_calls for each row execute function refuse_stuck_end()`),
  );
  try {
    await startGateway();
    const [ended] = await until(
      () => callsById(next!.callId),
      (rows) => rows[0]?.endedAt != null,
      25_000,
      200,
    );
    expect(ended).toMatchObject({ reason: "gateway_lost", gateway: ghost });
    expect((await callsById(stuck!.callId))[0]?.endedAt).toBeNull();
  } finally {
    await db.execute(sql`drop trigger refuse_stuck_end on sip_calls`);
    await db.execute(sql`drop function refuse_stuck_end()`);
    await db.delete(sipCalls).where(eq(sipCalls.gateway, ghost));
    await redis().hdel(redisKey("sip", "gateways"), ghost);
  }
}, 60_000);
