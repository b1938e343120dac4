// parallel-test: alone (DTMF keyed in real time: RTP telephone-events paced by sipp, SIP INFO digits)
/**
 * A caller with no room keys the conference id in: by SIP INFO or as RFC 4733 telephone-events
 * in RTP, ended by #, and is hung up on after the configured number of wrong ids.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { mapperIdFor } from "../../src/modules/mapper/service";
import { newAccount } from "../helpers";
import { startBridge, startTestGateway } from "../support/sip-gateway";
import { endedCall, expectSuccess, usageEvents } from "../support/sip-calls";
import { runSipp, SCENARIOS } from "../support/sipp";

describe("conference ids keyed in", () => {
  let owner: Awaited<ReturnType<typeof newAccount>>;
  let bridge: ReturnType<typeof startBridge>;
  let gateway: Awaited<ReturnType<typeof startTestGateway>>;
  let standupId: number;

  beforeAll(async () => {
    owner = await newAccount();
    bridge = startBridge();
    gateway = await startTestGateway({
      accountId: owner.accountId,
      joinUrl: bridge.url,
      dtmfAttempts: 2,
      dtmfTimeoutMs: 10_000,
    });
    standupId = await mapperIdFor(owner.accountId, "standup@conference.example.com");
  });

  afterAll(async () => {
    await gateway?.stop();
    bridge?.stop();
  });

  test("with no room at all the caller keys the conference id in by SIP INFO, ended by #", async () => {
    const digits = Object.fromEntries([...String(standupId)].map((digit, i) => [`d${i + 1}`, digit]));
    const run = await runSipp({
      scenario: "dtmf_info.xml",
      port: gateway.port,
      service: "gateway",
      keys: digits,
      holdMs: 300,
    });
    expectSuccess(run);
    const record = await endedCall(run.callId);
    expect(record).toMatchObject({
      accountId: owner.accountId,
      room: "standup",
      resolvedBy: "dtmf",
      mapperId: standupId,
      reason: "caller_bye",
    });
    expect(record.joinedAt).toBeInstanceOf(Date);
    expect((await usageEvents(run.callId)).map((event) => event.kind)).toEqual(["call_started", "call_ended"]);
  });

  test("the conference id can be keyed in as RFC 4733 telephone-events in RTP", async () => {
    const dir = mkdtempSync(join(tmpdir(), "parley-dtmf-"));
    const scenario = join(dir, "dtmf_rtp.xml");
    const keypresses = [...`${standupId}#`]
      .map((key) => {
        const pcap = `/usr/share/sip-tester/dtmf_2833_${key === "#" ? "pound" : key}.pcap`;
        return `  <nop><action><exec play_pcap_audio="${pcap}"/></action></nop>\n  <pause milliseconds="250"/>`;
      })
      .join("\n");
    writeFileSync(
      scenario,
      readFileSync(join(SCENARIOS, "dtmf_rtp.xml"), "utf8").replace("<!-- KEYPRESSES -->", keypresses),
    );
    try {
      const run = await runSipp({ scenario, port: gateway.port, service: "gateway", holdMs: 300 });
      expectSuccess(run);
      expect(await endedCall(run.callId)).toMatchObject({
        room: "standup",
        resolvedBy: "dtmf",
        mapperId: standupId,
        reason: "caller_bye",
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 15_000);

  test("after the configured number of wrong ids the gateway hangs up", async () => {
    const run = await runSipp({ scenario: "dtmf_info_wrong.xml", port: gateway.port, service: "gateway" });
    expectSuccess(run);
    const record = await endedCall(run.callId);
    expect(record).toMatchObject({ room: null, reason: "dtmf_failed", finalStatus: 200 });
    expect(record.answeredAt).toBeInstanceOf(Date);
  });
});
