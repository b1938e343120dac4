/** SIP over TLS: baresip calling over a TLS connection, bridged to a media endpoint over UDP. */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { config } from "../../src/core/config";
import { callsById } from "../../sip-gateway/call-log";
import { newAccount } from "../helpers";
import { startBaresip } from "../support/baresip";
import { selfSignedCertificate } from "../support/certificate";
import { freePort } from "../support/ports";
import { startTestGateway } from "../support/sip-gateway";
import { runSipp } from "../support/sipp";

describe("SIP over TLS", () => {
  let dir: string;
  let cert: string;
  let key: string;

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "parley-sip-tls-"));
    ({ cert, key } = selfSignedCertificate(dir, "/CN=127.0.0.1"));
  });

  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  test("a call over TLS is answered, bridged and recorded as TLS", async () => {
    const owner = await newAccount();
    const endpointPort = await freePort();
    const endpoint = runSipp({
      scenario: "media_endpoint.xml",
      port: 9,
      listenPort: endpointPort,
      timeoutSeconds: 15,
      extra: ["-rtp_echo", "-trace_msg"],
    });
    await Bun.sleep(300);
    const tlsPort = await freePort();
    const gateway = await startTestGateway({
      accountId: owner.accountId,
      defaultRoom: "standup",
      tls: { port: tlsPort, certPath: cert, keyPath: key },
      media: {
        ...config.sip.media,
        uris: [`sip:jigasi@127.0.0.1:${endpointPort}`],
        conferenceDomain: "conference.example.com",
      },
    });
    try {
      expect(gateway.gateway.tlsPort).toBe(tlsPort);
      // sipp is built without TLS here; baresip (libre with OpenSSL) is the TLS phone.
      const phone = await startBaresip();
      try {
        await phone.dial(`sip:gateway@127.0.0.1:${tlsPort};transport=tls`);
        await phone.waitFor(/Call established/);
        const [call] = [...gateway.gateway.calls.values()];
        await Bun.sleep(1_000);
        await phone.hangUp();
        const uas = await endpoint;
        expect(uas.code).toBe(0);
        expect(uas.messages).toContain("Jitsi-Conference-Room: standup@conference.example.com");
        let record = (await callsById(call!.callId))[0];
        for (let i = 0; i < 50 && !record?.endedAt; i++) {
          await Bun.sleep(50);
          record = (await callsById(call!.callId))[0];
        }
        expect(record).toMatchObject({ transport: "TLS", finalStatus: 200, reason: "caller_bye", mediaStatus: 200 });
        expect(record!.packetsToCaller).toBeGreaterThan(20);
      } finally {
        await phone.stop();
      }
    } finally {
      await gateway.stop();
    }
  }, 30_000);
});
