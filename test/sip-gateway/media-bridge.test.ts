// parallel-test: alone (RTP relayed at its real pace and DTMF keyed by baresip in real time)
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { callsById } from "../../sip-gateway/call-log";
import type { SipConfig } from "../../src/core/config";
import { openRtpSockets } from "../../sip-gateway/media";
import { mapperIdFor } from "../../src/modules/mapper/service";
import { newAccount } from "../helpers";
import { freePort } from "../support/ports";
import { rmsAmplitude, startBaresip } from "../support/baresip";
import { startTestGateway } from "../support/sip-gateway";
import { endedCall, expectSuccess, mediaEndpoint, mediaEndpointsEnded } from "../support/sip-calls";
import { runSipp } from "../support/sipp";
import { until } from "../support/wait";

/** True once the gateway has a call whose endpoint leg answered (its record says so). */
async function endpointAnswered(gateway: Awaited<ReturnType<typeof startTestGateway>>): Promise<boolean> {
  const [call] = [...gateway.gateway.calls.values()];
  if (!call) return false;
  const [record] = await callsById(call.callId);
  return record?.mediaStatus === 200 && record.answeredAt !== null;
}

async function noRtpSocketsLeft(): Promise<void> {
  for (let i = 0; i < 40 && openRtpSockets() > 0; i++) await Bun.sleep(50);
  expect(openRtpSockets()).toBe(0);
}

describe("sip gateway as a back-to-back user agent", () => {
  let owner: Awaited<ReturnType<typeof newAccount>>;
  const gateways: Awaited<ReturnType<typeof startTestGateway>>[] = [];

  const gatewayFor = async (uris: string[], media: Partial<SipConfig["media"]> = {}) => {
    const gateway = await startTestGateway({
      accountId: owner.accountId,
      media: {
        uris,
        selection: "failover",
        roomHeader: "Jitsi-Conference-Room",
        conferenceDomain: "conference.example.com",
        relay: true,
        responseTimeoutMs: 1_000,
        answerTimeoutMs: 1_500,
        ...media,
      },
    });
    gateways.push(gateway);
    return gateway;
  };

  beforeAll(async () => {
    owner = await newAccount();
  });

  afterAll(async () => {
    for (const gateway of gateways) await gateway.stop();
    await mediaEndpointsEnded();
  });

  test("a call is bridged to the media endpoint with the room header, and audio is relayed both ways", async () => {
    const endpoint = await mediaEndpoint("media_endpoint.xml");
    const gateway = await gatewayFor([endpoint.uri]);
    const caller = await runSipp({
      scenario: "media_call.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: standup" },
      holdMs: 1_500,
    });
    expectSuccess(caller, "caller");
    const uas = await endpoint.done;
    expectSuccess(uas, "endpoint");
    expect(uas.messages).toContain("Jitsi-Conference-Room: standup@conference.example.com");
    const record = await endedCall(caller.callId);
    expect(record).toMatchObject({
      room: "standup",
      finalStatus: 200,
      reason: "caller_bye",
      mediaEndpoint: endpoint.uri,
      mediaStatus: 200,
    });
    expect(record.mediaCallId).toBeString();
    expect(record.mediaCallId).not.toBe(caller.callId);
    // 1.5 s of 20 ms packets: about 75 each way.
    expect(record.packetsFromCaller).toBeGreaterThan(40);
    expect(record.packetsToCaller).toBeGreaterThan(40);
    await noRtpSocketsLeft();
  }, 30_000);

  for (const refusal of ["486", "503"]) {
    test(`an endpoint refusing with ${refusal} gives the caller a failure and leaves nothing open`, async () => {
      const endpoint = await mediaEndpoint(`media_endpoint_${refusal}.xml`);
      const gateway = await gatewayFor([endpoint.uri]);
      const caller = await runSipp({
        scenario: "failed_call.xml",
        port: gateway.port,
        service: "gateway",
        keys: { extra_header: "Parley-Conference-Room: standup" },
      });
      expectSuccess(caller, "caller");
      expectSuccess(await endpoint.done, "endpoint");
      const record = await endedCall(caller.callId);
      expect(record).toMatchObject({
        finalStatus: Number(refusal),
        mediaEndpoint: endpoint.uri,
        mediaStatus: Number(refusal),
      });
      // The gateway forgets a call once it has finished, which its record may precede by a turn.
      expect(
        await until(
          () => gateway.gateway.calls.size,
          (open) => open === 0,
          5_000,
        ),
      ).toBe(0);
      await noRtpSocketsLeft();
    }, 30_000);
  }

  test("the endpoint hanging up ends the caller's leg", async () => {
    const endpoint = await mediaEndpoint("media_endpoint_bye.xml", 800);
    const gateway = await gatewayFor([endpoint.uri]);
    const caller = await runSipp({
      scenario: "gateway_bye.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: standup" },
    });
    expectSuccess(await endpoint.done, "endpoint");
    expectSuccess(caller, "caller");
    const record = await endedCall(caller.callId);
    expect(record).toMatchObject({ reason: "endpoint_bye", mediaStatus: 200 });
    await noRtpSocketsLeft();
  }, 30_000);

  test("a stopping gateway ends both legs of a bridged call", async () => {
    const endpoint = await mediaEndpoint("media_endpoint.xml");
    const gateway = await gatewayFor([endpoint.uri]);
    const caller = runSipp({
      scenario: "gateway_bye.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: standup" },
    });
    for (let i = 0; i < 100 && !(await endpointAnswered(gateway)); i++) await Bun.sleep(50);
    await gateway.stop();
    // Both sipp scenarios wait for the gateway's BYE.
    expectSuccess(await caller, "caller");
    expectSuccess(await endpoint.done, "endpoint");
    expect(await endedCall((await caller).callId)).toMatchObject({ reason: "shutdown", mediaStatus: 200 });
    await noRtpSocketsLeft();
  }, 30_000);

  test("an endpoint that never answers is cancelled, and the caller gets 408", async () => {
    const endpoint = await mediaEndpoint("media_endpoint_silent.xml");
    // Its answer is waited for the shortest time there is: it never comes, however long the wait.
    const gateway = await gatewayFor([endpoint.uri], { answerTimeoutMs: 500 });
    const caller = await runSipp({
      scenario: "failed_call.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: standup" },
    });
    expectSuccess(caller, "caller");
    expectSuccess(await endpoint.done, "endpoint");
    const record = await endedCall(caller.callId);
    expect(record).toMatchObject({ finalStatus: 408, reason: "media_endpoint_no_answer" });
    await noRtpSocketsLeft();
  }, 30_000);

  test("with every endpoint down the caller gets 503 after the response timeouts, not a hung call", async () => {
    const gateway = await gatewayFor(
      [`sip:jigasi@127.0.0.1:${await freePort()}`, `sip:jigasi@127.0.0.1:${await freePort()}`],
      // The shortest there is: neither endpoint listens, so no wait would hear an answer.
      { responseTimeoutMs: 100 },
    );
    const started = Date.now();
    const caller = await runSipp({
      scenario: "failed_call.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: standup" },
    });
    expectSuccess(caller, "caller");
    expect(Date.now() - started).toBeLessThan(5_000);
    const record = await endedCall(caller.callId);
    expect(record).toMatchObject({ finalStatus: 503, reason: "media_endpoint_silent" });
    await noRtpSocketsLeft();
  }, 30_000);

  test("a second endpoint takes the call when the first is down (fail-over)", async () => {
    const endpoint = await mediaEndpoint("media_endpoint.xml");
    // The first endpoint's silence costs its response timeout, shortened here.
    const gateway = await gatewayFor([`sip:jigasi@127.0.0.1:${await freePort()}`, endpoint.uri], {
      responseTimeoutMs: 500,
    });
    const caller = await runSipp({
      scenario: "call.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: standup" },
    });
    expectSuccess(caller, "caller");
    expectSuccess(await endpoint.done, "endpoint");
    expect((await endedCall(caller.callId)).mediaEndpoint).toBe(endpoint.uri);
  }, 30_000);

  test("the caller's CANCEL while the endpoint rings cancels the endpoint leg", async () => {
    const endpoint = await mediaEndpoint("media_endpoint_silent.xml");
    const gateway = await gatewayFor([endpoint.uri], { answerTimeoutMs: 10_000 });
    const caller = await runSipp({
      scenario: "cancel.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: standup" },
    });
    expectSuccess(caller, "caller");
    // The endpoint saw the CANCEL (its scenario waits for it) long before its answer timeout.
    expectSuccess(await endpoint.done, "endpoint");
    expect(await endedCall(caller.callId)).toMatchObject({ finalStatus: 487, reason: "cancelled" });
    await noRtpSocketsLeft();
  }, 30_000);

  test("hold and resume by re-INVITE keep the bridge and its audio", async () => {
    const endpoint = await mediaEndpoint("media_endpoint.xml");
    const gateway = await gatewayFor([endpoint.uri]);
    const caller = await runSipp({
      scenario: "hold.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: standup" },
      holdMs: 1_000,
    });
    expectSuccess(caller, "caller");
    expectSuccess(await endpoint.done, "endpoint");
    const record = await endedCall(caller.callId);
    expect(record).toMatchObject({ reason: "caller_bye", mediaStatus: 200 });
    expect(record.packetsToCaller).toBeGreaterThan(20);
    await noRtpSocketsLeft();
  }, 30_000);

  test("a re-INVITE dropping the bridged codec is refused 488 and the call goes on", async () => {
    const endpoint = await mediaEndpoint("media_endpoint.xml");
    const gateway = await gatewayFor([endpoint.uri]);
    const caller = await runSipp({
      scenario: "reinvite_codec_change.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: standup" },
      holdMs: 300,
    });
    expectSuccess(caller, "caller");
    expectSuccess(await endpoint.done, "endpoint");
    expect(await endedCall(caller.callId)).toMatchObject({ reason: "caller_bye", mediaStatus: 200 });
  }, 30_000);

  test("with SIP_MEDIA_RELAY=false the SDP passes end to end and the gateway opens no RTP socket", async () => {
    const endpoint = await mediaEndpoint("media_endpoint.xml", 1_000);
    const gateway = await gatewayFor([endpoint.uri], { relay: false });
    const running = runSipp({
      scenario: "media_call.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: standup" },
      holdMs: 1_000,
      extra: ["-trace_msg"],
    });
    // Once the endpoint has answered, a relay would have its sockets open.
    expect(await until(() => endpointAnswered(gateway), Boolean, 10_000, 20)).toBe(true);
    expect(openRtpSockets()).toBe(0);
    const caller = await running;
    expectSuccess(caller, "caller");
    const uas = await endpoint.done;
    expectSuccess(uas, "endpoint");
    // The endpoint got the caller's own session description, and the caller the endpoint's.
    expect(uas.messages).toContain("o=caller 53655765");
    expect(caller.messages).toContain("o=jigasi 1 1");
    const record = await endedCall(caller.callId);
    expect(record).toMatchObject({ reason: "caller_bye", mediaStatus: 200, packetsFromCaller: null });
  }, 30_000);

  for (const relay of [true, false]) {
    test(`early media reaches the caller as a 183 before the answer (${relay ? "relayed" : "SDP as is"})`, async () => {
      const endpoint = await mediaEndpoint("media_endpoint_early.xml", 500);
      const gateway = await gatewayFor([endpoint.uri], { relay });
      const caller = await runSipp({
        scenario: "early_call.xml",
        port: gateway.port,
        service: "gateway",
        keys: { extra_header: "Parley-Conference-Room: standup" },
        extra: ["-trace_msg"],
      });
      expectSuccess(caller, "caller");
      expectSuccess(await endpoint.done, "endpoint");
      // The 183's session description is the gateway's relay, or the endpoint's own.
      const progress = caller.messages.split(/-{10,}/).find((message) => message.includes("SIP/2.0 183"));
      expect(progress).not.toContain("SIP/2.0 200");
      expect(progress).toContain(relay ? "o=parley" : "o=jigasi");
      expect(await endedCall(caller.callId)).toMatchObject({ reason: "caller_bye", mediaStatus: 200 });
    }, 30_000);
  }

  test("a caller without SDP is offered the codec its bridge carries", async () => {
    const endpoint = await mediaEndpoint("media_endpoint.xml");
    const gateway = await gatewayFor([endpoint.uri]);
    const caller = await runSipp({
      scenario: "late_offer_bridged.xml",
      port: gateway.port,
      service: "gateway",
      keys: { extra_header: "Parley-Conference-Room: standup" },
    });
    expectSuccess(caller, "caller");
    const uas = await endpoint.done;
    expectSuccess(uas, "endpoint");
    expect(uas.messages).toMatch(/m=audio \d+ RTP\/AVP 0 101/);
    expect(await endedCall(caller.callId)).toMatchObject({ reason: "caller_bye", mediaStatus: 200 });
  }, 30_000);

  test("round-robin starts each call at the next endpoint", async () => {
    const first = await mediaEndpoint("media_endpoint.xml");
    const second = await mediaEndpoint("media_endpoint.xml");
    const gateway = await gatewayFor([first.uri, second.uri], { selection: "round-robin" });
    const keys = { extra_header: "Parley-Conference-Room: standup" };
    const calls = [await runSipp({ scenario: "call.xml", port: gateway.port, service: "gateway", keys })];
    calls.push(await runSipp({ scenario: "call.xml", port: gateway.port, service: "gateway", keys }));
    for (const call of calls) expectSuccess(call, "caller");
    expectSuccess(await first.done, "first endpoint");
    expectSuccess(await second.done, "second endpoint");
    expect((await endedCall(calls[0]!.callId)).mediaEndpoint).toBe(first.uri);
    expect((await endedCall(calls[1]!.callId)).mediaEndpoint).toBe(second.uri);
  }, 30_000);

  test("baresip keys the conference id as DTMF; audio reaches the endpoint and back; hang-up ends both", async () => {
    const mapperId = await mapperIdFor(owner.accountId, "weekly@conference.example.com");
    const endpoint = await mediaEndpoint("media_endpoint.xml");
    const gateway = await gatewayFor([endpoint.uri]);
    const phone = await startBaresip();
    try {
      await phone.dial(`sip:gateway@127.0.0.1:${gateway.port}`);
      await phone.waitFor(/Call established/);
      await phone.key(`${mapperId}#`);
      // Once the conference id took the call to the endpoint, 1.5 s of audio through the bridge
      // and back: about 75 packets each way, at the real pace of the media.
      expect(await until(() => endpointAnswered(gateway), Boolean, 10_000, 20)).toBe(true);
      await Bun.sleep(1_500);
      const [open] = [...gateway.gateway.calls.values()];
      expect(open).toBeDefined();
      await phone.hangUp();
      const hungUp = Date.now();
      expectSuccess(await endpoint.done, "endpoint");
      expect(Date.now() - hungUp).toBeLessThan(1_000);
      const uas = await endpoint.done;
      expect(uas.messages).toContain("Jitsi-Conference-Room: weekly@conference.example.com");
      const record = await endedCall(open!.callId);
      expect(record).toMatchObject({ room: "weekly", resolvedBy: "dtmf", reason: "caller_bye", mediaStatus: 200 });
      expect(record.packetsFromCaller).toBeGreaterThan(50);
      expect(record.packetsToCaller).toBeGreaterThan(50);
      const recording = phone.recording();
      expect(recording).toBeString();
      expect(rmsAmplitude(recording!)).toBeGreaterThan(0.05);
      await noRtpSocketsLeft();
    } finally {
      await phone.stop();
    }
  }, 40_000);
});
