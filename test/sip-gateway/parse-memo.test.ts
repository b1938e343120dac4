/**
 * The memoized grammar against sip.js's own, over real messages: what sipp, baresip (over UDP
 * and TLS) and Kamailio sent the gateway in the SIP tests, as sip.js received them
 * (corpus/messages.jsonl). Each message is parsed by sip.js's parser with its own grammar and
 * with the memoized one, first filling the memo and then from it, and the two must be the same
 * objects down to their classes; a result handed out must share nothing with the next. The
 * quick readers (Via, From and To, Call-ID) are held to the grammar over those messages'
 * headers and over generated ones.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
// sip.js is loaded as the gateway loads it, behind its patches (see sip-gateway/grammar-cache.ts).
import "../../sip-gateway/grammar-cache";
import "../../sip-gateway/merged-requests";

const { Core, Grammar } = await import("sip.js");
const { fresh, memoizedParse, quickCallId, quickNameAddr, quickVia } = await import("../../sip-gateway/parse-memo");

type Parse = (input: string, startRule: string) => unknown;

const corpus = readFileSync(resolve(import.meta.dir, "corpus/messages.jsonl"), "utf8")
  .split("\n")
  .filter((line) => line !== "")
  .map((line) => JSON.parse(line) as { peer: string; message: string });

// The gateway installs the memo when it loads; the grammar under it is sip.js's own.
const installed = Grammar.parse as unknown as Parse & { unmemoized?: Parse };
const grammar: Parse = installed.unmemoized ?? installed;
const quiet = { error() {}, warn() {}, log() {}, debug() {} } as unknown as Parameters<
  typeof Core.Parser.parseMessage
>[1];

/** sip.js's parse of a whole message with the given Grammar.parse. */
function parseWith(parse: Parse, message: string) {
  const saved = Grammar.parse;
  Object.assign(Grammar, { parse });
  try {
    return Core.Parser.parseMessage(message, quiet);
  } finally {
    Object.assign(Grammar, { parse: saved });
  }
}

/** A value as plain data that keeps what toEqual would not compare: classes and fields set to undefined. */
function shape(value: unknown): unknown {
  if (value === null || typeof value !== "object") return value === undefined ? "(undefined)" : value;
  if (Array.isArray(value)) return value.map(shape);
  const fields: Record<string, unknown> = { "(class)": value.constructor?.name ?? "(none)" };
  for (const key of Object.keys(value)) fields[key] = shape((value as Record<string, unknown>)[key]);
  return fields;
}

/** Every object reachable from a value. */
function objects(value: unknown, into = new Set<object>()): Set<object> {
  if (value === null || typeof value !== "object" || into.has(value)) return into;
  into.add(value);
  for (const key of Object.keys(value)) objects((value as Record<string, unknown>)[key], into);
  return into;
}

describe("memoized SIP grammar", () => {
  test("the corpus holds each peer's messages", () => {
    const peers = new Set(corpus.map((entry) => entry.peer));
    expect([...peers].sort()).toEqual(["baresip over TLS", "kamailio and baresip", "sipp"]);
    expect(corpus.length).toBeGreaterThan(50);
  });

  test("parses every message of the corpus as sip.js's grammar does, filling the memo and from it", () => {
    const memo = memoizedParse(grammar);
    let parsed = 0;
    for (const { peer, message } of corpus) {
      const expected = shape(parseWith(grammar, message));
      expect({ peer, parsed: shape(parseWith(memo, message)) }).toEqual({ peer, parsed: expected });
      expect({ peer, parsed: shape(parseWith(memo, message)) }).toEqual({ peer, parsed: expected });
      if (expected !== "(undefined)") parsed++;
    }
    expect(parsed).toBe(corpus.length);
  });

  test("headers that repeat across messages are parsed once", () => {
    let calls = 0;
    const memo = memoizedParse((input, rule) => {
      calls++;
      return grammar(input, rule);
    });
    for (const { message } of corpus) parseWith(memo, message);
    const first = calls;
    for (const { message } of corpus) parseWith(memo, message);
    expect(calls).toBe(first);
    let plain = 0;
    const counting: Parse = (input, rule) => {
      plain++;
      return grammar(input, rule);
    };
    for (const { message } of corpus) parseWith(counting, message);
    expect(first).toBeLessThan(plain);
  });

  test("a result shares no object with the memo or with another caller's", () => {
    const memo = memoizedParse(grammar);
    const invite = corpus.find((entry) => entry.message.startsWith("INVITE"))!.message;
    const first = parseWith(memo, invite)!;
    const second = parseWith(memo, invite)!;
    const seen = objects(first);
    for (const object of objects(second)) expect(seen.has(object)).toBe(false);
    // What sip.js does to what it is handed (a dialog's URIs, parameters) reaches no later parse.
    first.from.uri.user = "changed";
    first.from.setParam("tag", "changed");
    first.parseHeader("contact").uri.setParam("transport", "changed");
    expect(shape(parseWith(memo, invite))).toEqual(shape(parseWith(grammar, invite)));
  });

  test("a copy keeps classes and fields left undefined, and the memo stays within its size", () => {
    const uri = grammar("sip:alice@example.com;lr;transport=udp", "SIP_URI");
    expect(shape(fresh(uri))).toEqual(shape(uri));
    expect(Object.getPrototypeOf(fresh(uri))).toBe(Object.getPrototypeOf(uri));
    expect(fresh(uri)).not.toBe(uri);
    let calls = 0;
    const memo = memoizedParse((input, rule) => {
      calls++;
      return grammar(input, rule);
    }, 2);
    for (const value of ["1 INVITE", "2 BYE", "3 ACK", "1 INVITE"]) memo(value, "CSeq");
    // "1 INVITE" was the oldest of three in a memo of two, so it was parsed again.
    expect(calls).toBe(4);
    expect(memo("not a cseq", "CSeq")).toBe(-1);
  });

  test("quickVia reads a Via of the usual shape as the grammar does, fields in order; the rest is left to it", () => {
    const transports = ["UDP", "TCP", "TLS", "udp", "SCTP", "WSS"];
    const hosts = [
      "127.0.0.1",
      "10.0.0.255",
      "192.168.1.10",
      "0.0.0.0",
      "255.255.255.255",
      "256.1.1.1",
      "1.2.3.260",
      "01.2.3.4",
      "1.2.3.4.5",
      "1.2.3",
      "example.com",
      "[::1]",
    ];
    const ports = ["", ":5060", ":1", ":0", ":65535", ":99999", ":123456", ":05060", ":"];
    const params = [
      "",
      ";branch=z9hG4bK-9324-1-0",
      ";branch=z9hG4bKd14.faee2b1786e8bd9c8eccda3a280b9fa3.0",
      ";branch=z9hG4bK.x!%*_+`'~-9",
      ";rport",
      ";rport=5060",
      ";rport=",
      ";rport=123456",
      ";received=127.0.0.1",
      ";received=::1",
      ";received=01.2.3.4",
      ";received=example.com",
      ";BRANCH=x",
      ";Received=1.2.3.4",
      ";ttl=5",
      ";maddr=1.2.3.4",
      ";foo",
      ";foo=bar",
      ";branch=",
      ';branch="x"',
      " ;branch=x",
      ";branch = x",
      ";branch=x, SIP/2.0/UDP 10.0.0.1;branch=y",
    ];
    const pairs = [
      ";branch=a;branch=b",
      ";rport;rport=5",
      ";rport=5;rport",
      ";rport;rport",
      ";received=1.2.3.4;received=5.6.7.8",
      ";rport=5;rport=6",
      ";branch=x;rport;received=1.2.3.4",
      ";received=127.0.0.1;branch=x;rport=45365",
      ";branch=x;rport=46597;received=127.0.0.1",
    ];
    const vias: string[] = [];
    for (const transport of transports)
      for (const host of hosts)
        for (const port of ports)
          for (const tail of [...params, ...pairs]) vias.push(`SIP/2.0/${transport} ${host}${port}${tail}`);
    vias.push(
      "SIP / 2.0 / UDP 127.0.0.1:5060;branch=x",
      "SIP/2.0/UDP  127.0.0.1;branch=x",
      "SIP/2.0/UDP 127.0.0.1;branch=x ",
      "SIP/3.0/UDP 127.0.0.1;branch=x",
    );
    let read = 0;
    for (const via of vias) {
      const quick = quickVia(via);
      if (quick === undefined) continue;
      read++;
      expect({ via, parsed: JSON.stringify(shape(quick)) }).toEqual({
        via,
        parsed: JSON.stringify(shape(grammar(via, "Via"))),
      });
    }
    expect(read).toBeGreaterThan(500);
    // The peers' own Vias are all of the usual shape.
    const peerVias = corpus.flatMap(({ message }) =>
      message
        .split("\r\n")
        .filter((line) => line.startsWith("Via: "))
        .map((line) => line.slice(5)),
    );
    expect(peerVias.length).toBeGreaterThan(50);
    for (const via of peerVias) {
      expect({ via, read: quickVia(via) !== undefined }).toEqual({ via, read: true });
      expect(JSON.stringify(shape(quickVia(via)))).toBe(JSON.stringify(shape(grammar(via, "Via"))));
    }
  });

  test("quickNameAddr and quickCallId read the usual From, To, Call-ID as the grammar does, or defer to it", () => {
    const names = [
      "",
      '"Caller" ',
      '"Caller"',
      '"A B" ',
      '"" ',
      '" A" ',
      '"A\\"B" ',
      '"Ünï" ',
      "Caller ",
      '"a.b-c_d+1" ',
    ];
    const users = ["+15551230001", "caller", "a.b_c-d!~*'", "caller-0x55d56b8ae4f0", "a%20b", "a;b", ""];
    const hosts = [
      "127.0.0.1",
      "10.0.0.255",
      "example.com",
      "gw-1.example.com",
      "localhost",
      "1abc.com",
      "a_b.com",
      "abc.1com",
      "gw-1.example.com.",
      "999.1.1.1",
      "1.2.3.4.5",
      "01.2.3.4",
      "a-.com",
      "[::1]",
    ];
    const ports = ["", ":5060", ":0", ":99999", ":123456"];
    const uriParams = [
      "",
      ";transport=udp",
      ";transport=tls",
      ";transport=TLS",
      ";transport=sctp",
      ";lr",
      ";transport=udp;lr",
      ";user=phone",
    ];
    const tails = [
      "",
      ";tag=9324SIPpTag001",
      ";tag=eb6a92cde93e40c54c6675f101acb5e7.e0a29ec0",
      ";tag=",
      ";TAG=x",
      ";tag=x;foo=bar",
      ";foo",
      ";tag=a;tag=b",
      " ;tag=x",
    ];
    let read = 0;
    for (const rule of ["From", "To"]) {
      for (const name of names)
        for (const user of users)
          for (const host of hosts)
            for (const port of ports)
              for (const param of uriParams)
                for (const tail of tails) {
                  const value = `${name}<sip:${user}${user ? "@" : ""}${host}${port}${param}>${tail}`;
                  const quick = quickNameAddr(value);
                  if (quick === undefined) continue;
                  read++;
                  expect({ value, parsed: JSON.stringify(shape(quick)) }).toEqual({
                    value,
                    parsed: JSON.stringify(shape(grammar(value, rule))),
                  });
                }
    }
    for (const value of [
      "sip:a@1.2.3.4;tag=x",
      "<sips:a@1.2.3.4>",
      "<SIP:a@1.2.3.4>",
      "<sip:a@1.2.3.4;transport=udp>",
      "<sip:a@1.2.3.4?x=y>",
      "<tel:+1555>",
    ]) {
      const quick = quickNameAddr(value);
      if (quick !== undefined) expect(JSON.stringify(shape(quick))).toBe(JSON.stringify(shape(grammar(value, "From"))));
    }
    expect(read).toBeGreaterThan(1_000);
    for (const value of [
      "b0de98cd-5ae2-4026-b161-983f4a02d430-1",
      "abc@1.2.3.4",
      "cdab561db68c0a64",
      "a%b!c",
      "a b",
      "a@b@c",
      "",
      "a@",
      "<a>",
      "a:b",
      '"a"',
    ]) {
      const quick = quickCallId(value);
      if (quick !== undefined) expect({ value, quick }).toEqual({ value, quick: grammar(value, "Call_ID") as string });
    }
    // The peers' own From, To and Call-ID are all of the usual shape.
    const lines = corpus.flatMap(({ message }) => message.split("\r\n"));
    const values = (prefix: string) =>
      lines.filter((line) => line.startsWith(prefix)).map((line) => line.slice(prefix.length));
    expect(values("From: ").length).toBeGreaterThan(50);
    for (const [prefix, rule] of [
      ["From: ", "From"],
      ["To: ", "To"],
    ] as const) {
      for (const value of values(prefix)) {
        expect({ value, read: quickNameAddr(value) !== undefined }).toEqual({ value, read: true });
        expect(JSON.stringify(shape(quickNameAddr(value)))).toBe(JSON.stringify(shape(grammar(value, rule))));
      }
    }
    for (const value of values("Call-ID: "))
      expect({ value, quick: quickCallId(value) }).toEqual({ value, quick: grammar(value, "Call_ID") as string });
  });
});
