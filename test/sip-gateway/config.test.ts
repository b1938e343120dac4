import { describe, expect, test } from "bun:test";
import { ConfigError, loadConfig } from "../../src/config";

describe("sip configuration", () => {
  test("defaults: both transports on 5060, the Parley room header, three DTMF attempts, no trunk", () => {
    const { sip } = loadConfig({});
    expect(sip).toMatchObject({ udpPort: 5060, tcpPort: 5060, roomHeader: "Parley-Conference-Room", dtmfAttempts: 3, allowedSources: [] });
    expect(sip.trunk.registrar).toBeUndefined();
  });

  test("lists, ranges and header names are parsed and checked, naming the variable", () => {
    expect(loadConfig({ SIP_ALLOWED_SOURCES: "10.0.0.0/8, 2001:db8::1" }).sip.allowedSources).toEqual(["10.0.0.0/8", "2001:db8::1"]);
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
    ];
    for (const env of refused) {
      const name = Object.keys(env).at(-1)!.startsWith("SIP_TRUNK") ? "SIP_TRUNK_REGISTRAR" : Object.keys(env)[0]!;
      expect(() => loadConfig(env)).toThrow(ConfigError);
      expect(() => loadConfig(env)).toThrow(name);
    }
  });
});
