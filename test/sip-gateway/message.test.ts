import { describe, expect, test } from "bun:test";
import { SourceGuard } from "../../sip-gateway/guard";
import { negotiate, UnacceptableOffer } from "../../sip-gateway/media";
import {
  addViaPort,
  frameStream,
  MalformedMessage,
  parseHead,
  removeViaPort,
  requestDestination,
  responseDestination,
  retarget,
  stampReceived,
} from "../../sip-gateway/message";

const INVITE = [
  "INVITE sip:4815162342@gw.example.com SIP/2.0",
  "Via: SIP/2.0/UDP 10.0.0.5:5062;branch=z9hG4bK-1;rport, SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK-0",
  "f: <sip:alice@example.com>;tag=a",
  "t: <sip:4815162342@gw.example.com>",
  "i: abc@10.0.0.5",
  "CSeq: 1 INVITE",
  "Parley-Request-URI: sip:forged@evil",
  "l: 0",
  "",
  "",
].join("\r\n");

describe("SIP message handling in the transports", () => {
  test("compact headers, folded Via lists and the CSeq method are understood", () => {
    const head = parseHead(INVITE);
    expect(head.kind).toBe("request");
    expect(head.method).toBe("INVITE");
    expect(head.headers.get("via")).toHaveLength(2);
    expect(head.headers.get("call-id")).toEqual(["abc@10.0.0.5"]);
  });

  test("messages missing what a response needs are malformed", () => {
    expect(() => parseHead("INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK1\r\n\r\n")).toThrow(
      MalformedMessage,
    );
    expect(() => parseHead(INVITE.replace("CSeq: 1 INVITE", "CSeq: 1 BYE"))).toThrow(MalformedMessage);
    expect(() => parseHead("\u0000\u0001garbage")).toThrow(MalformedMessage);
  });

  test("a received request gets received and rport stamped on its top Via, and responses go there", () => {
    const stamped = stampReceived(INVITE, "203.0.113.9", 40000);
    const head = parseHead(stamped);
    expect(head.headers.get("via")![0]).toBe(
      "SIP/2.0/UDP 10.0.0.5:5062;branch=z9hG4bK-1;rport=40000;received=203.0.113.9",
    );
    expect(head.headers.get("via")![1]).toBe("SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK-0");
    const response = stamped.replace(/^INVITE [^\r]*/, "SIP/2.0 200 OK");
    expect(responseDestination(parseHead(response))).toEqual({ host: "203.0.113.9", port: 40000 });
  });

  test("requests go to their Request-URI, 5060 when it names no port", () => {
    expect(requestDestination(parseHead(INVITE))).toEqual({ host: "gw.example.com", port: 5060 });
  });

  test("requests in a dialog set up through a proxy go to the first Route entry", () => {
    const bye = [
      "BYE sip:caller@198.51.100.7:5062 SIP/2.0",
      "Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK9",
      "Route: <sip:10.0.0.1:5070;lr;ftag=a>, <sip:10.0.0.2;lr>",
      "Route: <sip:10.0.0.3;lr>",
      "f: <sip:a@b>;tag=x",
      "t: <sip:c@d>;tag=y",
      "i: abc",
      "CSeq: 2 BYE",
      "Content-Length: 0",
      "",
      "",
    ].join("\r\n");
    expect(requestDestination(parseHead(bye))).toEqual({ host: "10.0.0.1", port: 5070 });
  });

  test("retargeting keeps the dialled URI in one trustworthy header", () => {
    const text = retarget(INVITE, parseHead(INVITE), "parley");
    const head = parseHead(text);
    expect(head.requestUri).toBe("sip:parley@gw.example.com");
    expect(head.headers.get("parley-request-uri")).toEqual(["sip:4815162342@gw.example.com"]);
  });

  test("the Via port is added to outgoing requests and taken off responses for sip.js", () => {
    const request = "BYE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK9;rport\r\n";
    expect(addViaPort(request, 5070)).toContain("Via: SIP/2.0/UDP 192.0.2.1:5070;branch=z9hG4bK9;rport");
    const response = "SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 192.0.2.1:5070;branch=z9hG4bK9;rport=5070\r\n";
    expect(removeViaPort(response, 5070)).toContain("Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK9;rport=5070");
    expect(removeViaPort(response, 5071)).toBe(response);
  });

  test("a TCP stream is framed by Content-Length, keep-alive CRLFs skipped, partial messages kept", () => {
    const body = "v=0\r\n";
    const message = `OPTIONS sip:a@b SIP/2.0\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    const { messages, rest } = frameStream(Buffer.from(`\r\n\r\n${message}${message.slice(0, 20)}`), 4096);
    expect(messages).toEqual([message]);
    expect(rest.toString()).toBe(message.slice(0, 20));
    expect(() => frameStream(Buffer.from("OPTIONS sip:a@b SIP/2.0\r\n\r\n"), 4096)).toThrow(MalformedMessage);
    expect(() => frameStream(Buffer.from("x".repeat(5000)), 4096)).toThrow(MalformedMessage);
  });
});

describe("SDP negotiation", () => {
  const offer = (media: string) =>
    `v=0\r\no=- 1 1 IN IP4 198.51.100.7\r\ns=-\r\nc=IN IP4 198.51.100.7\r\nt=0 0\r\n${media}`;

  test("the caller's first G.711 codec is chosen, with its telephone-event payload type", () => {
    const chosen = negotiate(
      offer("m=audio 4000 RTP/AVP 18 8 0 96\r\na=rtpmap:96 telephone-event/8000\r\na=sendonly\r\n"),
    );
    expect(chosen).toMatchObject({
      codec: { payloadType: 8, name: "PCMA" },
      telephoneEvent: 96,
      remote: { address: "198.51.100.7", port: 4000 },
      direction: "sendonly",
    });
  });

  test("video is left aside and audio answered", () => {
    const chosen = negotiate(offer("m=video 5000 RTP/AVP 96\r\na=rtpmap:96 VP8/90000\r\nm=audio 4000 RTP/AVP 0\r\n"));
    expect(chosen).toMatchObject({ audioIndex: 1, codec: { name: "PCMU" }, telephoneEvent: undefined });
  });

  test("offers the gateway cannot serve are refused", () => {
    expect(() => negotiate(offer("m=audio 4000 RTP/AVP 18\r\n"))).toThrow(UnacceptableOffer);
    expect(() => negotiate(offer("m=audio 4000 RTP/SAVP 0\r\n"))).toThrow(UnacceptableOffer);
    expect(() => negotiate(offer("m=audio 0 RTP/AVP 0\r\n"))).toThrow(UnacceptableOffer);
    expect(() => negotiate("garbage")).toThrow(UnacceptableOffer);
  });
});

describe("source guard", () => {
  const invite = parseHead(INVITE);

  test("the allow-list takes addresses and CIDR ranges, IPv4-mapped IPv6 included", () => {
    const guard = new SourceGuard(["192.0.2.0/24", "2001:db8::/32", "198.51.100.7"], 0);
    expect(guard.mayInvite("192.0.2.200")).toBe(true);
    expect(guard.mayInvite("::ffff:192.0.2.1")).toBe(true);
    expect(guard.mayInvite("2001:db8:1::5")).toBe(true);
    expect(guard.mayInvite("198.51.100.7")).toBe(true);
    expect(guard.mayInvite("198.51.100.8")).toBe(false);
    expect(guard.admit(invite, "203.0.113.1")).toEqual({ status: 403, reason: "Forbidden" });
  });

  test("each source gets its own request rate", () => {
    const guard = new SourceGuard([], 5);
    const verdicts = Array.from({ length: 8 }, () => guard.admit(invite, "192.0.2.1"));
    expect(verdicts.filter((verdict) => verdict === "pass")).toHaveLength(5);
    expect(guard.admit(invite, "192.0.2.2")).toBe("pass");
  });
});
