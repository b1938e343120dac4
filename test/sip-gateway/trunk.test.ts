/**
 * The whole path with real peers: Kamailio as the operator's proxy and registrar (the
 * gateway registers with digest auth), baresip as the phone, the gateway bridging the call to
 * a sipp media endpoint that echoes the audio.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { config, type SipConfig } from "../../src/core/config";
import { openRtpSockets } from "../../sip-gateway/media";
import { newAccount } from "../helpers";
import { type Baresip, rmsAmplitude, startBaresip } from "../support/baresip";
import { type Kamailio, startKamailio } from "../support/kamailio";
import { startTestGateway } from "../support/sip-gateway";
import { endedCall, expectSuccess, mediaEndpoint, mediaEndpointsEnded } from "../support/sip-calls";
import { until } from "../support/wait";

const TRUNK_USER = { username: "4815162342", password: "trunk-secret" };

describe("a phone call through the operator's proxy reaches the conference's media endpoint", () => {
  let owner: Awaited<ReturnType<typeof newAccount>>;
  let kamailio: Kamailio;
  const cleanups: (() => Promise<void>)[] = [];

  beforeAll(async () => {
    owner = await newAccount();
    kamailio = await startKamailio(TRUNK_USER);
  });

  // Each test's gateway unregisters as it stops, so the next test's calls reach the next gateway.
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  afterAll(async () => {
    await kamailio?.stop();
    await mediaEndpointsEnded();
  });

  const registeredGateway = async (mediaUri: string, password = TRUNK_USER.password) => {
    const trunk: SipConfig["trunk"] = {
      ...config.sip.trunk,
      registrar: `sip:127.0.0.1:${kamailio.port}`,
      aor: `sip:${TRUNK_USER.username}@127.0.0.1`,
      username: TRUNK_USER.username,
      password,
      transport: "udp",
      expiresSeconds: 60,
    };
    const gateway = await startTestGateway({
      accountId: owner.accountId,
      defaultRoom: "townhall",
      trunk,
      media: {
        ...config.sip.media,
        uris: [mediaUri],
        conferenceDomain: "conference.example.com",
        responseTimeoutMs: 1_000,
        answerTimeoutMs: 3_000,
      },
    });
    cleanups.push(() => gateway.stop());
    // Until the registrar answered the authenticated REGISTER: registered, or refused (sip.js is
    // loaded only behind the gateway, see sip-gateway/grammar-cache.ts, so its enum is compared by value).
    await until(
      () => gateway.gateway.registrationState as string | undefined,
      (state) => state === "Registered" || state === "Unregistered",
      10_000,
      20,
    );
    return gateway;
  };

  const phone = async (): Promise<Baresip> => {
    const started = await startBaresip();
    cleanups.push(() => started.stop());
    return started;
  };

  test("the gateway registers with digest auth; baresip calls via Kamailio: two-way audio, room header", async () => {
    const endpoint = await mediaEndpoint("media_endpoint.xml");
    const gateway = await registeredGateway(endpoint.uri);
    expect(gateway.gateway.registrationState as string).toBe("Registered");
    const caller = await phone();
    await caller.dial(`sip:${TRUNK_USER.username}@127.0.0.1:${kamailio.port}`);
    await caller.waitFor(/Call established/);
    // 1.5 s of audio through the bridge and back, at the real pace of the media: about 75
    // packets each way.
    await Bun.sleep(1_500);
    const [call] = [...gateway.gateway.calls.values()];
    expect(call).toBeDefined();
    await caller.hangUp();
    const hungUp = Date.now();
    const uas = await endpoint.done;
    expectSuccess(uas, "endpoint");
    expect(Date.now() - hungUp).toBeLessThan(1_000);
    expect(uas.messages).toContain("Jitsi-Conference-Room: townhall@conference.example.com");

    const record = await endedCall(call!.callId);
    // The INVITE came from Kamailio, not from the phone.
    expect(record).toMatchObject({
      room: "townhall",
      resolvedBy: "default",
      source: `127.0.0.1:${kamailio.port}`,
      reason: "caller_bye",
      mediaStatus: 200,
    });
    expect(record.packetsFromCaller).toBeGreaterThan(50);
    expect(record.packetsToCaller).toBeGreaterThan(50);
    expect(kamailio.output()).toContain("relaying INVITE to sip:parley@127.0.0.1");
    const recording = caller.recording();
    expect(recording).toBeString();
    expect(rmsAmplitude(recording!)).toBeGreaterThan(0.05);
    for (let i = 0; i < 40 && openRtpSockets() > 0; i++) await Bun.sleep(50);
    expect(openRtpSockets()).toBe(0);
  }, 40_000);

  test("the endpoint's hang-up reaches the phone through Kamailio's route set", async () => {
    const endpoint = await mediaEndpoint("media_endpoint_bye.xml", 1_500);
    const gateway = await registeredGateway(endpoint.uri);
    const caller = await phone();
    await caller.dial(`sip:${TRUNK_USER.username}@127.0.0.1:${kamailio.port}`);
    await caller.waitFor(/Call established/);
    const [call] = [...gateway.gateway.calls.values()];
    expectSuccess(await endpoint.done, "endpoint");
    const endpointHungUp = Date.now();
    await caller.waitFor(/terminated/, 2_000);
    expect(Date.now() - endpointHungUp).toBeLessThan(1_000);
    expect(await endedCall(call!.callId)).toMatchObject({ reason: "endpoint_bye" });
    expect(kamailio.output()).toContain(`in-dialog BYE from 127.0.0.1:${gateway.port}`);
  }, 40_000);

  test("a wrong trunk password leaves the gateway unregistered", async () => {
    const gateway = await registeredGateway("sip:jigasi@127.0.0.1:9", "wrong");
    expect(gateway.gateway.registrationState as string).toBe("Unregistered");
  }, 20_000);
});
