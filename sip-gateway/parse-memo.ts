/**
 * sip.js parses every header of every message with its generated grammar (`Grammar.parse`),
 * an interpreter of peggy bytecode that costs tens of microseconds per header; under load that
 * was a third of the gateway's CPU. Most of what it parses repeats: the start line, Contact,
 * CSeq, Max-Forwards, Content-Type and Content-Length are the same on every call from a peer,
 * and a dialog's From, To and Call-ID come back on each of its requests. So results are
 * memoized by rule and text. sip.js keeps and changes what it is handed (a dialog's URIs, a
 * message's headers), so every hit is a deep copy of the stored result, built like a fresh
 * parse: same classes, same own fields, nothing shared with the cache or an earlier caller.
 * The headers new on every call or transaction (the top Via with its branch; From, To and
 * Call-ID with their tags and ids) are read without the grammar when they have their usual
 * shape (quickVia, quickNameAddr, quickCallId), and anything else goes to the grammar.
 */
import { NameAddrHeader, URI } from "sip.js";

/** Results kept; past this the oldest go first (a Via, with its branch, seldom comes twice). */
const ENTRIES = 8_192;

type Parse = (input: string, startRule: string) => unknown;

/**
 * A copy of a parse result: plain data and sip.js's grammar objects (URI, NameAddrHeader), which hold only own fields.
 */
export function fresh<T>(value: T): T {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map(fresh) as T;
  const copy = Object.create(Object.getPrototypeOf(value)) as Record<string, unknown>;
  for (const key of Object.keys(value)) copy[key] = fresh((value as Record<string, unknown>)[key]);
  return copy as T;
}

const OCTET = "(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
const IPV4 = `${OCTET}(?:\\.${OCTET}){3}`;
/** The shape quickVia reads: UDP, TCP or TLS, an IPv4 sent-by, parameters with no spaces or quotes. */
const VIA = new RegExp(
  `^SIP/2\\.0/(UDP|TCP|TLS) (${IPV4})(?::([1-9]\\d{0,4}))?((?:;[a-z]+(?:=[A-Za-z0-9.!%*_+\`'~-]+)?)*)$`,
);
const RECEIVED = new RegExp(`^${IPV4}$`);
const DIGITS = /^\d{1,5}$/;

/**
 * sip.js's grammar's result for a Via of the usual shape, built as its rules build it (a bare
 * `rport` lands in `params`), or undefined for any other shape (another parameter, one given
 * twice, a host name, IPv6, spaces, several values), which the grammar then reads.
 */
export function quickVia(input: string): Record<string, unknown> | undefined {
  const match = VIA.exec(input);
  if (!match) return undefined;
  const via: Record<string, unknown> = { protocol: "SIP", transport: match[1], host_type: "IPv4", host: match[2] };
  if (match[3] !== undefined) via.port = Number(match[3]);
  if (match[4] === "") return via;
  for (const param of match[4]!.slice(1).split(";")) {
    const equals = param.indexOf("=");
    const name = equals < 0 ? param : param.slice(0, equals);
    const value = equals < 0 ? undefined : param.slice(equals + 1);
    if (name === "branch" && value !== undefined && via.branch === undefined) via.branch = value;
    else if (name === "received" && value !== undefined && via.received === undefined && RECEIVED.test(value))
      via.received = value;
    else if (name === "rport" && value !== undefined && via.rport === undefined && DIGITS.test(value))
      via.rport = value;
    else if (name === "rport" && value === undefined && via.params === undefined) via.params = { rport: undefined };
    else return undefined;
  }
  return via;
}

const TOKEN = "[A-Za-z0-9.!%*_+`'~-]+";
const LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?";
const DOMAIN = `(?:${LABEL}\\.)*[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?`;
/**
 * The shape quickNameAddr reads: an optional plain quoted name, a sip:
 * URI of a user, a host, a port and a transport only, an optional tag.
 */
const NAME_ADDR = new RegExp(
  [
    '^(?:"([A-Za-z0-9+._-]+(?: [A-Za-z0-9+._-]+)*)" ?)?',
    `<sip:(?:([A-Za-z0-9+._!~*'-]+)@)?(${IPV4}|${DOMAIN})(?::([1-9]\\d{0,4}))?(?:;transport=(udp|tcp|tls))?>`,
    `(?:;tag=(${TOKEN}))?$`,
  ].join(""),
);

/**
 * NameAddrHeader as the grammar calls it: an absent name and
 * absent parameters are undefined, which its typings do not allow.
 */
const GrammarNameAddr = NameAddrHeader as unknown as new (
  uri: URI,
  displayName: string | undefined,
  parameters: undefined,
) => NameAddrHeader;

/**
 * sip.js's grammar's result for a From or To of the usual shape, built with the classes and
 * the steps of its rules, or undefined for any other shape (URI parameters other than a
 * lower-case transport, header parameters other than the tag, escapes,
 * an unquoted name, IPv6, another scheme), which the grammar then reads.
 */
export function quickNameAddr(input: string): NameAddrHeader | undefined {
  const match = NAME_ADDR.exec(input);
  if (!match) return undefined;
  const [, displayName, user, host, port, transport, tag] = match;
  const uri = new URI(
    "sip",
    user as string,
    host!,
    port === undefined ? undefined : Number(port),
    transport === undefined ? undefined : { transport },
  );
  const header = new GrammarNameAddr(uri, displayName, undefined);
  if (tag) header.setParam("tag", tag);
  return header;
}

const CALL_ID = new RegExp(`^${TOKEN}(?:@${TOKEN})?$`);

/** The grammar's Call-ID (the text itself) for the usual shape, a word or word@word of token characters. */
export function quickCallId(input: string): string | undefined {
  return CALL_ID.test(input) ? input : undefined;
}

/** The headers read without the grammar when they have their usual shape, by grammar rule. */
const QUICK = new Map<string, (input: string) => unknown>([
  ["Via", quickVia],
  ["From", quickNameAddr],
  ["To", quickNameAddr],
  ["Call_ID", quickCallId],
]);

/**
 * `parse` with its results memoized by rule and input; every call returns a result of its own. `unmemoized` is `parse`.
 */
export function memoizedParse(parse: Parse, entries = ENTRIES): Parse & { unmemoized: Parse } {
  const results = new Map<string, unknown>();
  const memoized = (input: string, startRule: string) => {
    const quick = QUICK.get(startRule)?.(input);
    if (quick !== undefined) return quick;
    const key = `${startRule}\n${input}`;
    let result = results.get(key);
    if (result === undefined && !results.has(key)) {
      result = parse(input, startRule);
      if (results.size === entries) results.delete(results.keys().next().value!);
      results.set(key, result);
    }
    return fresh(result);
  };
  return Object.assign(memoized, { unmemoized: parse });
}
