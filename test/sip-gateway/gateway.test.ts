/**
 * The SIP gateway's signalling against sipp: how a call finds its room, what it records and bills,
 * and how it ends. Conference ids keyed in by DTMF are timed in real time: test/sip-gateway/dtmf.test.ts.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { config } from "../../src/core/config";
import { mapperIdFor } from "../../src/modules/mapper/service";
import { callsById } from "../../sip-gateway/call-log";
import { newAccount } from "../helpers";
import { startBridge, startTestGateway } from "../support/sip-gateway";
import { endedCall, expectSuccess, usageEvents } from "../support/sip-calls";
import { runSipp } from "../support/sipp";
import { until } from "../support/wait";

type Gateway = Awaited<ReturnType<typeof startTestGateway>>;

describe("sip gateway", () => {
  let owner: Awaited<ReturnType<typeof newAccount>>;
  let other: Awaited<ReturnType<typeof newAccount>>;
  let bridge: ReturnType<typeof startBridge>;
  let gateway: Gateway;
  let standupId: number;
  let otherRoomId: number;

  beforeAll(async () => {
    [owner, other] = await Promise.all([newAccount(), newAccount()]);
    bridge = startBridge();
    gateway = await startTestGateway({
      accountId: owner.accountId,
      joinUrl: bridge.url,
      dtmfAttempts: 2,
      dtmfTimeoutMs: 10_000,
    });
    standupId = await mapperIdFor(owner.accountId, "standup@conference.example.com");
    otherRoomId = await mapperIdFor(other.accountId, "Design-Review@conference.other.example");
  });

  afterAll(async () => {
    await gateway?.stop();
    bridge?.stop();
  });

  const call = (keys: Record<string, string>, options: Partial<Parameters<typeof runSipp>[0]> = {}) =>
    runSipp({ scenario: "call.xml", port: gateway.port, service: "gateway", keys, ...options });

  test("a room header with a full room address joins that room, and the call is recorded and billed", async () => {
    const run = await call({ extra_header: "Parley-Conference-Room: Lobby@conference.example.com" });
    expectSuccess(run);
    const record = await endedCall(run.callId);
    expect(record).toMatchObject({
      accountId: owner.accountId,
      room: "lobby",
      resolvedBy: "header",
      caller: "+15551230001@127.0.0.1",
      callee: "gateway@127.0.0.1",
      transport: "UDP",
      finalStatus: 200,
      reason: "caller_bye",
    });
    expect(record.answeredAt).toBeInstanceOf(Date);
    expect(record.joinedAt).toBeInstanceOf(Date);
    expect(record.endedAt!.getTime()).toBeGreaterThanOrEqual(record.answeredAt!.getTime());

    const joins = bridge.received.filter((entry) => entry.callId === run.callId);
    expect(joins.map((entry) => entry.event)).toEqual(["join", "leave"]);
    expect(joins[0]).toMatchObject({
      accountId: owner.accountId,
      room: "lobby",
      conference: "lobby@conference.example.com",
    });
    expect(joins[0]!.media).toMatchObject({ codec: "PCMA", payloadType: 8 });
    expect(joins[1]!.reason).toBe("caller_bye");

    const events = await usageEvents(run.callId);
    expect(events.map((event) => [event.kind, event.room, event.accountId])).toEqual([
      ["call_started", "lobby", owner.accountId],
      ["call_ended", "lobby", owner.accountId],
    ]);
    expect(events[1]!.payload).toEqual({
      caller: "+15551230001@127.0.0.1",
      callee: "gateway@127.0.0.1",
      answered: true,
      reason: "caller_bye",
    });
    expect(events[0]!.dedupeKey).toBe(`call:${run.callId}:started`);
  });

  test("a bare room name in the header joins the gateway account's room, lower-cased", async () => {
    const run = await call({ extra_header: "Parley-Conference-Room: Standup" });
    expectSuccess(run);
    expect(await endedCall(run.callId)).toMatchObject({
      accountId: owner.accountId,
      room: "standup",
      resolvedBy: "header",
    });
  });

  test("a numeric id in the header joins the mapped room of the account that owns the mapping", async () => {
    const run = await call({ extra_header: `Parley-Conference-Room: ${otherRoomId}` });
    expectSuccess(run);
    expect(await endedCall(run.callId)).toMatchObject({
      accountId: other.accountId,
      room: "design-review",
      resolvedBy: "header",
      mapperId: otherRoomId,
    });
    const events = await usageEvents(run.callId);
    expect(events.every((event) => event.accountId === other.accountId && event.room === "design-review")).toBe(true);
  });

  test("Jigasi's Jitsi-Conference-Room header is read too", async () => {
    const run = await call({ extra_header: "Jitsi-Conference-Room: retro@conference.example.com" });
    expectSuccess(run);
    expect(await endedCall(run.callId)).toMatchObject({ room: "retro", resolvedBy: "header" });
  });

  test("a numeric Request-URI user is resolved through the conference mapper", async () => {
    const run = await call({}, { service: String(standupId) });
    expectSuccess(run);
    expect(await endedCall(run.callId)).toMatchObject({
      accountId: owner.accountId,
      room: "standup",
      resolvedBy: "uri",
      mapperId: standupId,
    });
  });

  test("an unknown numeric id in the Request-URI or the header is answered 404 and recorded unanswered", async () => {
    const byUri = await runSipp({ scenario: "not_found.xml", port: gateway.port, service: "123456789" });
    expectSuccess(byUri);
    expect(await endedCall(byUri.callId)).toMatchObject({
      room: null,
      accountId: null,
      finalStatus: 404,
      reason: "not_found",
      answeredAt: null,
    });
    const byHeader = await runSipp({
      scenario: "not_found.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: 987654321" },
    });
    expectSuccess(byHeader);
    expect(await endedCall(byHeader.callId)).toMatchObject({ finalStatus: 404, reason: "not_found" });
    expect(await usageEvents(byUri.callId)).toEqual([]);
  });

  test("with neither header nor numeric user, the configured default room is joined", async () => {
    const withDefault = await startTestGateway({
      accountId: owner.accountId,
      defaultRoom: "Reception",
      trunk: { ...config.sip.trunk, aor: "sip:4815162342@trunk.example.com" },
    });
    try {
      const run = await runSipp({ scenario: "call.xml", port: withDefault.port, service: "gateway" });
      expectSuccess(run);
      expect(await endedCall(run.callId)).toMatchObject({
        accountId: owner.accountId,
        room: "reception",
        resolvedBy: "default",
      });
      // The trunk's own number in the Request-URI is not a conference id.
      const toOwnNumber = await runSipp({ scenario: "call.xml", port: withDefault.port, service: "4815162342" });
      expectSuccess(toOwnNumber);
      expect(await endedCall(toOwnNumber.callId)).toMatchObject({
        room: "reception",
        resolvedBy: "default",
        callee: "4815162342@127.0.0.1",
      });
    } finally {
      await withDefault.stop();
    }
  });

  test("a CANCEL while the call rings ends it with 487, and nothing is billed", async () => {
    const ringing = await startTestGateway({ accountId: owner.accountId, ringMs: 2_000 });
    try {
      const run = await runSipp({ scenario: "cancel.xml", port: ringing.port, service: String(standupId) });
      expectSuccess(run);
      expect(await endedCall(run.callId)).toMatchObject({
        room: "standup",
        reason: "cancelled",
        finalStatus: 487,
        answeredAt: null,
      });
      const events = await usageEvents(run.callId);
      expect(events.map((event) => [event.kind, event.payload.answered])).toEqual([["call_ended", false]]);
    } finally {
      await ringing.stop();
    }
  });

  test("the gateway hangs up with a BYE when the call reaches its longest duration", async () => {
    const short = await startTestGateway({ accountId: owner.accountId, maxCallSeconds: 1 });
    try {
      // Over TCP the BYE goes back on the caller's own connection. Both calls at once: each
      // lasts the shortest longest duration there is (1 s).
      const overTcp = runSipp({
        scenario: "gateway_bye.xml",
        port: short.port,
        transport: "tcp",
        service: "gateway",
        keys: { extra_header: "Parley-Conference-Room: lobby" },
      });
      const run = await runSipp({
        scenario: "gateway_bye.xml",
        port: short.port,
        service: "gateway",
        keys: { extra_header: "Parley-Conference-Room: lobby" },
      });
      expectSuccess(run);
      const record = await endedCall(run.callId);
      expect(record).toMatchObject({ room: "lobby", reason: "max_duration" });
      const events = await usageEvents(run.callId);
      expect(events.at(-1)!.payload).toMatchObject({ answered: true, reason: "max_duration" });
      const tcpRun = await overTcp;
      expectSuccess(tcpRun);
      expect(await endedCall(tcpRun.callId)).toMatchObject({ transport: "TCP", reason: "max_duration" });
    } finally {
      await short.stop();
    }
  }, 15_000);

  test("one source address holds at most SIP_MAX_CALLS_PER_SOURCE calls: past it 503 with Retry-After", async () => {
    const capped = await startTestGateway({ accountId: owner.accountId, maxCallSeconds: 3, maxCallsPerSource: 2 });
    const keys = { extra_header: "Parley-Conference-Room: lobby" };
    const from = (localIp: string, scenario: string, more: Partial<Parameters<typeof runSipp>[0]> = {}) =>
      runSipp({ scenario, port: capped.port, service: "gateway", keys, localIp, ...more });
    try {
      // Two calls from 127.0.0.2, on until the gateway ends them after 3 s.
      const holding = from("127.0.0.2", "gateway_bye.xml", { calls: 2 });
      expect(
        await until(
          () => capped.gateway.calls.size,
          (n) => n === 2,
        ),
      ).toBe(2);
      const refused = await from("127.0.0.2", "full.xml", { extra: ["-trace_msg"] });
      expectSuccess(refused);
      expect(refused.messages).toMatch(/SIP\/2\.0 503[\s\S]*Retry-After: 5/);
      // Another source is not counted with it.
      expectSuccess(await from("127.0.0.3", "call.xml"));
      expectSuccess(await holding);
      expect(
        await until(
          () => capped.gateway.calls.size,
          (n) => n === 0,
        ),
      ).toBe(0);
      // Its calls ended, the source calls again.
      expectSuccess(await from("127.0.0.2", "call.xml"));
    } finally {
      await capped.stop();
    }
  }, 20_000);

  test("an answered call that never gets its ACK is ended", async () => {
    const run = await runSipp({
      scenario: "no_ack.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: lobby" },
    });
    expectSuccess(run);
    expect(await endedCall(run.callId)).toMatchObject({ room: "lobby", reason: "no_ack" });
  });

  test("a caller who hangs up before its ACK arrives is not ended again when the ACK wait runs out", async () => {
    const run = await runSipp({
      scenario: "bye_without_ack.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: lobby" },
    });
    expectSuccess(run);
    const ended = await endedCall(run.callId);
    expect(ended).toMatchObject({ room: "lobby", reason: "caller_bye" });
    // Past the ACK wait (the test gateway's ackTimeoutMs, 1 s from the answer), which must find
    // the call over: the record keeps its end, and the gateway still answers.
    await Bun.sleep(Math.max(0, ended.answeredAt!.getTime() + 1_300 - Date.now()));
    expect(await endedCall(run.callId)).toMatchObject({ reason: "caller_bye", endedAt: ended.endedAt });
    expectSuccess(await runSipp({ scenario: "options.xml", port: gateway.port }));
  });

  test("a re-INVITE is answered with a new description for the new offer", async () => {
    const run = await runSipp({
      scenario: "reinvite.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: lobby" },
    });
    expectSuccess(run);
    expect(await endedCall(run.callId)).toMatchObject({ room: "lobby", reason: "caller_bye" });
  });

  test("an INVITE without SDP gets the gateway's offer in the 200 and the caller's answer in the ACK", async () => {
    const run = await runSipp({
      scenario: "late_offer.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: lobby" },
    });
    expectSuccess(run);
    expect(await endedCall(run.callId)).toMatchObject({ room: "lobby", reason: "caller_bye" });
  });

  test("a stopping gateway hangs up its calls with a BYE and records why", async () => {
    const stopping = await startTestGateway({ accountId: owner.accountId });
    const cid = crypto.randomUUID();
    const pending = runSipp({
      scenario: "gateway_bye.xml",
      port: stopping.port,
      service: "gateway",
      keys: { cid, extra_header: "Parley-Conference-Room: lobby" },
    });
    // Stop only once the call is answered, so the gateway's BYE is what ends it.
    for (let i = 0; i < 200 && !(await callsById(`${cid}-1`))[0]?.answeredAt; i++) await Bun.sleep(25);
    await stopping.stop();
    const run = await pending;
    expectSuccess(run);
    expect(await endedCall(run.callId)).toMatchObject({ room: "lobby", reason: "shutdown" });
  });

  test("an offer without G.711 is refused with 488", async () => {
    const run = await runSipp({
      scenario: "unacceptable_media.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: lobby" },
    });
    expectSuccess(run);
    expect(await endedCall(run.callId)).toMatchObject({ finalStatus: 488, reason: "unacceptable_media", room: null });
  });

  test("OPTIONS keep-alives are answered 200 on UDP and TCP", async () => {
    expectSuccess(await runSipp({ scenario: "options.xml", port: gateway.port }));
    expectSuccess(await runSipp({ scenario: "options.xml", port: gateway.port, transport: "tcp" }));
  });

  test("a call over TCP works the same, BYE included", async () => {
    const run = await call(
      { extra_header: "Parley-Conference-Room: lobby@conference.example.com" },
      { transport: "tcp" },
    );
    expectSuccess(run);
    expect(await endedCall(run.callId)).toMatchObject({ room: "lobby", transport: "TCP", reason: "caller_bye" });
  });

  test("a failed conference join ends the answered call", async () => {
    const failing = startBridge(502);
    const refusing = await startTestGateway({ accountId: owner.accountId, joinUrl: failing.url });
    try {
      const run = await runSipp({
        scenario: "gateway_bye.xml",
        port: refusing.port,
        service: "gateway",
        keys: { extra_header: "Parley-Conference-Room: lobby" },
      });
      expectSuccess(run);
      expect(await endedCall(run.callId)).toMatchObject({ room: "lobby", reason: "join_failed", joinedAt: null });
      expect(failing.received.map((entry) => entry.event)).toEqual(["join"]);
    } finally {
      await refusing.stop();
      failing.stop();
    }
  });

  test("INVITEs from a source outside the allow-list are refused with 403", async () => {
    const guarded = await startTestGateway({ accountId: owner.accountId, allowedSources: ["127.0.0.1/32"] });
    try {
      const refused = await runSipp({
        scenario: "refused.xml",
        port: guarded.port,
        service: "gateway",
        localIp: "127.0.0.2",
      });
      expectSuccess(refused);
      expect(await callsById(refused.callId)).toEqual([]);
      const allowed = await runSipp({
        scenario: "call.xml",
        port: guarded.port,
        service: "gateway",
        keys: { extra_header: "Parley-Conference-Room: lobby" },
      });
      expectSuccess(allowed);
    } finally {
      await guarded.stop();
    }
  });

  test("registers to an upstream trunk with digest credentials", async () => {
    const { freePort, udpBound } = await import("../support/ports");
    const registrarPort = await freePort();
    const registrar = runSipp({ scenario: "registrar.xml", port: 9, listenPort: registrarPort, timeoutSeconds: 10 });
    await until(() => udpBound(registrarPort), Boolean, 10_000, 10);
    const registering = await startTestGateway({
      trunk: {
        registrar: `sip:127.0.0.1:${registrarPort}`,
        aor: "sip:4815162342@127.0.0.1",
        username: "parley-trunk",
        password: "s3cret-trunk",
        transport: "udp",
        expiresSeconds: 600,
      },
    });
    try {
      // sip.js is loaded only behind the gateway (see sip-gateway/grammar-cache.ts), so its enum is compared by value.
      const state = () => registering.gateway.registrationState as string;
      expect(await until(state, (now) => now === "Registered", 10_000, 20)).toBe("Registered");
    } finally {
      // Stopping, the gateway removes its binding, which the registrar answers at once.
      await registering.stop();
    }
    expectSuccess(await registrar);
  });
});

describe("sip gateway robustness", () => {
  let owner: Awaited<ReturnType<typeof newAccount>>;
  let gateway: Gateway;

  beforeAll(async () => {
    owner = await newAccount();
    gateway = await startTestGateway({ accountId: owner.accountId, requestsPerSecond: 50, maxMessageBytes: 4_096 });
  });

  afterAll(async () => {
    await gateway?.stop();
  });

  test("garbage, malformed and oversized datagrams are dropped or answered, and calls go on", async () => {
    const answers: string[] = [];
    const socket = await Bun.udpSocket({
      hostname: "127.0.0.1",
      socket: { data: (_socket, data) => void answers.push(data.toString()) },
    });
    const via = `Via: SIP/2.0/UDP 127.0.0.1:${socket.port};branch=z9hG4bK-garbage`;
    const messages = [
      Buffer.from([0, 1, 2, 3, 255, 254, 13, 10, 13, 10]),
      "hello world\r\n\r\n",
      "INVITE sip:x@y SIP/2.0\r\nVia: nonsense\r\n\r\n",
      `INVITE sip:x@127.0.0.1 SIP/2.0\r\n${via}\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:x@y>\r\n` +
        "Call-ID: g1\r\nCSeq: 1 INVITE\r\nContent-Length: 500\r\n\r\nv=0\r\n",
      `OPTIONS sip:x@127.0.0.1 SIP/2.0\r\n${via}\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:x@y>\r\n` +
        `Call-ID: g2\r\nCSeq: 1 OPTIONS\r\nX-Padding: ${"a".repeat(5_000)}\r\nContent-Length: 0\r\n\r\n`,
      `INVITE sip:x@127.0.0.1 SIP/2.0\r\n${via}\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:x@y>\r\n` +
        "Call-ID: g3\r\nCSeq: one INVITE\r\n\r\n",
    ];
    for (const message of messages) socket.send(message, gateway.port, "127.0.0.1");
    for (let i = 0; i < 40 && answers.length < 2; i++) await Bun.sleep(25);
    socket.close();
    expect(answers.some((answer) => answer.startsWith("SIP/2.0 400 "))).toBe(true);
    expect(answers.some((answer) => answer.startsWith("SIP/2.0 513 "))).toBe(true);
    expect(gateway.gateway.stats.UDP!.dropped).toBeGreaterThanOrEqual(messages.length - 1);

    const tcp = await Bun.connect({ hostname: "127.0.0.1", port: gateway.port, socket: { data() {} } });
    tcp.write(`GARBAGE ${"x".repeat(8_000)}\r\n\r\n`);
    await Bun.sleep(100);
    tcp.end();

    const run = await runSipp({
      scenario: "call.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: lobby" },
    });
    expectSuccess(run);
    const tcpRun = await runSipp({ scenario: "options.xml", port: gateway.port, transport: "tcp" });
    expectSuccess(tcpRun);
  });

  test("a flood from one source is cut to its rate while another source still gets through", async () => {
    const flooder = await Bun.udpSocket({ hostname: "127.0.0.2", socket: { data() {} } });
    const before = gateway.gateway.stats.UDP!.refused;
    const flood = (n: number) =>
      `OPTIONS sip:127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.2:${flooder.port};branch=z9hG4bK-flood${n}\r\n` +
      `From: <sip:f@127.0.0.2>;tag=${n}\r\nTo: <sip:127.0.0.1>\r\nCall-ID: flood-${n}\r\n` +
      "CSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n";
    const flooding = (async () => {
      for (let batch = 0; batch < 40; batch++) {
        for (let i = 0; i < 50; i++) flooder.send(flood(batch * 50 + i), gateway.port, "127.0.0.1");
        await Bun.sleep(10);
      }
    })();
    const run = await runSipp({
      scenario: "call.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: lobby" },
    });
    await flooding;
    flooder.close();
    expectSuccess(run);
    // 50 requests a second are let through (some 25 in this half second); the kernel may drop
    // part of the 2,000 before they are read, so only a clear majority is asserted.
    expect(gateway.gateway.stats.UDP!.refused - before).toBeGreaterThan(500);
    expect(await endedCall(run.callId)).toMatchObject({
      accountId: owner.accountId,
      room: "lobby",
      reason: "caller_bye",
    });
  });
});
