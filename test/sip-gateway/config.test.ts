import { describe, expect, test } from "bun:test";
import { ConfigError, loadConfig } from "../../src/core/config";

describe("sip configuration", () => {
  test("defaults: both transports on 5060, the Parley room header, three DTMF attempts, no trunk", () => {
    const { sip } = loadConfig({});
    expect(sip).toMatchObject({
      udpPort: 5060,
      tcpPort: 5060,
      roomHeader: "Parley-Conference-Room",
      dtmfAttempts: 3,
      allowedSources: [],
    });
    expect(sip.trunk.registrar).toBeUndefined();
    expect(sip.tls.port).toBe(0);
    expect(sip.media).toMatchObject({
      uris: [],
      selection: "failover",
      roomHeader: "Jitsi-Conference-Room",
      relay: true,
    });
  });

  test("media endpoints: a comma-separated list of SIP URIs, relaying on unless turned off", () => {
    const { sip } = loadConfig({
      SIP_MEDIA_URI: "sip:jigasi@10.0.0.5:5070, sip:jigasi@10.0.0.6:5070;transport=tcp",
      SIP_MEDIA_SELECTION: "round-robin",
      SIP_MEDIA_RELAY: "false",
    });
    expect(sip.media).toMatchObject({
      uris: ["sip:jigasi@10.0.0.5:5070", "sip:jigasi@10.0.0.6:5070;transport=tcp"],
      selection: "round-robin",
      relay: false,
    });
  });

  test("lists, ranges and header names are parsed and checked, naming the variable", () => {
    expect(loadConfig({ SIP_ALLOWED_SOURCES: "10.0.0.0/8, 2001:db8::1" }).sip.allowedSources).toEqual([
      "10.0.0.0/8",
      "2001:db8::1",
    ]);
    const refused: Record<string, string>[] = [
      { SIP_ALLOWED_SOURCES: "10.0.0.0/33" },
      { SIP_ALLOWED_SOURCES: "not-an-address" },
      { SIP_ROOM_HEADER: "Bad Header:" },
      { SIP_UDP_PORT: "0", SIP_TCP_PORT: "0" },
      { SIP_RTP_PORT_MIN: "20000", SIP_RTP_PORT_MAX: "10000" },
      { SIP_TRUNK_REGISTRAR: "sip:trunk.example.com" },
      { SIP_TRUNK_REGISTRAR: "http://trunk" },
      { SIP_DEFAULT_ROOM: "lobby" },
      { SIP_JOIN_URL: "ftp://bridge" },
      { SIP_MEDIA_URI: "sip:jigasi@10.0.0.5, http://jigasi" },
      { SIP_MEDIA_URI: "sip:jigasi@10.0.0.5", SIP_JOIN_URL: "http://bridge" },
      { SIP_MEDIA_SELECTION: "random" },
      { SIP_MEDIA_ROOM_HEADER: "Bad Header:" },
      { SIP_TLS_PORT: "5061" },
    ];
    for (const env of refused) {
      const name = Object.keys(env).at(-1)!.startsWith("SIP_TRUNK") ? "SIP_TRUNK_REGISTRAR" : Object.keys(env)[0]!;
      expect(() => loadConfig(env)).toThrow(ConfigError);
      expect(() => loadConfig(env)).toThrow(name);
    }
  });
});

test("the gateway run alone names a wrong setting and exits 2 before it loads anything else", () => {
  const entry = new URL("../../src/index.ts", import.meta.url).pathname;
  const run = Bun.spawnSync([process.execPath, entry, "--role=sip"], {
    env: { ...process.env, SIP_UDP_PORT: "notaport", SIP_DTMF_ATTEMPTS: "many" },
  });
  expect(run.exitCode).toBe(2);
  const said = run.stderr.toString();
  expect(said).toContain("SIP_UDP_PORT");
  expect(said).toContain("SIP_DTMF_ATTEMPTS");
});
