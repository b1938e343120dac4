/**
 * Just enough SIP parsing for the transports: framing on TCP, a sanity check before
 * sip.js sees a message, the top Via for routing responses and the Request-URI for
 * routing requests. sip.js does the full parse; this layer only has to decide where a
 * message goes and whether it is worth handing on.
 */

const COMPACT: Record<string, string> = {
  v: "via",
  f: "from",
  t: "to",
  i: "call-id",
  m: "contact",
  l: "content-length",
  c: "content-type",
};

export interface SipMessageHead {
  kind: "request" | "response";
  /** Request method, upper case; for a response the method of its CSeq. */
  method: string;
  requestUri?: string;
  status?: number;
  /** Lower-case full header names; repeated and comma-joined values kept in order. */
  headers: Map<string, string[]>;
  headerText: string;
  body: string;
}

const REQUEST_LINE = /^([A-Za-z!%*_+`'~.-]+) (\S+) SIP\/2\.0$/;
const STATUS_LINE = /^SIP\/2\.0 (\d{3}) .*$/;
const MANDATORY = ["via", "from", "to", "call-id", "cseq"];

export class MalformedMessage extends Error {}

export function header(head: SipMessageHead, name: string): string | undefined {
  return head.headers.get(name.toLowerCase())?.[0];
}

/** Splits a header value on commas that are not inside quotes or angle brackets. */
function splitValues(value: string): string[] {
  const values: string[] = [];
  let depth = 0;
  let quoted = false;
  let start = 0;
  for (let i = 0; i < value.length; i++) {
    const char = value[i];
    if (char === '"' && value[i - 1] !== "\\") quoted = !quoted;
    else if (!quoted && char === "<") depth++;
    else if (!quoted && char === ">") depth--;
    else if (!quoted && depth === 0 && char === ",") {
      values.push(value.slice(start, i).trim());
      start = i + 1;
    }
  }
  values.push(value.slice(start).trim());
  return values.filter((item) => item !== "");
}

/** Parses the start line and headers; throws MalformedMessage when the message cannot be routed or answered. */
export function parseHead(text: string): SipMessageHead {
  const end = text.indexOf("\r\n\r\n");
  if (end < 0) throw new MalformedMessage("no end of headers");
  const headerText = text.slice(0, end + 2);
  const lines = headerText.split("\r\n");
  lines.pop();
  const startLine = lines.shift() ?? "";
  const headers = new Map<string, string[]>();
  let last: string | undefined;
  for (const line of lines) {
    if (line.startsWith(" ") || line.startsWith("\t")) {
      if (last === undefined) throw new MalformedMessage("continuation before any header");
      const values = headers.get(last)!;
      values[values.length - 1] += ` ${line.trim()}`;
      continue;
    }
    const colon = line.indexOf(":");
    if (colon <= 0) throw new MalformedMessage(`bad header line`);
    const rawName = line.slice(0, colon).trim().toLowerCase();
    if (!/^[a-z0-9!%*_+`'~.-]+$/.test(rawName)) throw new MalformedMessage("bad header name");
    const name = COMPACT[rawName] ?? rawName;
    const value = line.slice(colon + 1).trim();
    const list = headers.get(name) ?? [];
    if (name === "via" || name === "contact" || name === "route" || name === "record-route")
      list.push(...splitValues(value));
    else list.push(value);
    headers.set(name, list);
    last = name;
  }
  for (const name of MANDATORY) if (!headers.get(name)?.[0]) throw new MalformedMessage(`missing ${name}`);
  const cseq = /^(\d{1,10})\s+([A-Za-z!%*_+`'~.-]+)$/.exec(headers.get("cseq")![0]!);
  if (!cseq) throw new MalformedMessage("bad CSeq");
  const body = text.slice(end + 4);
  const request = REQUEST_LINE.exec(startLine);
  if (request) {
    if (request[1]!.toUpperCase() !== cseq[2]!.toUpperCase() && request[1] !== "ACK" && request[1] !== "CANCEL") {
      throw new MalformedMessage("CSeq method differs from the request method");
    }
    return { kind: "request", method: request[1]!.toUpperCase(), requestUri: request[2], headers, headerText, body };
  }
  const status = STATUS_LINE.exec(startLine);
  if (status)
    return { kind: "response", method: cseq[2]!.toUpperCase(), status: Number(status[1]), headers, headerText, body };
  throw new MalformedMessage("bad start line");
}

export interface ViaParts {
  transport: string;
  host: string;
  port?: number;
  params: Map<string, string | undefined>;
}

export function parseVia(value: string): ViaParts | undefined {
  const match = /^SIP\s*\/\s*2\.0\s*\/\s*([A-Za-z]+)\s+(\[[0-9a-fA-F:.]+\]|[^\s;:]+)(?::(\d{1,5}))?\s*((?:;.*)?)$/.exec(
    value,
  );
  if (!match) return undefined;
  const params = new Map<string, string | undefined>();
  for (const part of match[4]!.split(";").slice(1)) {
    const [name, ...rest] = part.split("=");
    params.set(name!.trim().toLowerCase(), rest.length > 0 ? rest.join("=").trim() : undefined);
  }
  return {
    transport: match[1]!.toUpperCase(),
    host: match[2]!.replace(/^\[|\]$/g, ""),
    port: match[3] ? Number(match[3]) : undefined,
    params,
  };
}

/** The source address the endpoint stamped on a request's top Via (`received=`), from its first Via header. */
export function viaSource(via: string): string | undefined {
  const top = splitValues(via)[0];
  return top === undefined ? undefined : parseVia(top.trim())?.params.get("received");
}

export interface Destination {
  host: string;
  port: number;
}

/** RFC 3261 18.2.2 with RFC 3581: a response goes to received:rport, else to the sent-by. */
export function responseDestination(head: SipMessageHead): Destination | undefined {
  const via = parseVia(header(head, "via") ?? "");
  if (!via) return undefined;
  const rport = via.params.get("rport");
  const host = via.params.get("received") ?? via.host;
  const port = rport ? Number(rport) : (via.port ?? 5060);
  return { host, port };
}

/** Where a request goes: the host and port of its Request-URI (no DNS: trunks are configured by address). */
export function requestDestination(head: SipMessageHead): Destination | undefined {
  // A dialog through a proxy (Record-Route) carries its route set as Route headers: the
  // first entry is the next hop (RFC 3261 12.2.1.1, 16.12), not the Request-URI.
  const route = header(head, "route");
  const nextHop = route === undefined ? undefined : splitValues(route)[0]?.trim();
  const target = nextHop ? (/<([^>]*)>/.exec(nextHop)?.[1] ?? nextHop) : (head.requestUri ?? "");
  const match = /^sips?:(?:[^@;]*@)?(\[[0-9a-fA-F:.]+\]|[^;:?>]+)(?::(\d{1,5}))?/.exec(target);
  if (!match) return undefined;
  return { host: match[1]!.replace(/^\[|\]$/g, ""), port: match[2] ? Number(match[2]) : 5060 };
}

/**
 * Stamps the top Via of a received request with where it really came from (received and,
 * when the sender asked for it, rport), so sip.js copies them into its responses and the
 * transport can send the responses back through NATs.
 */
export function stampReceived(text: string, address: string, port: number): string {
  const match = /^(?:Via|v)[ \t]*:[ \t]*/im.exec(text);
  if (!match) return text;
  const valueStart = match.index + match[0].length;
  const lineEnd = text.indexOf("\r\n", valueStart);
  const line = text.slice(valueStart, lineEnd);
  const firstValue = splitValues(line)[0] ?? line;
  const via = parseVia(firstValue);
  if (!via) return text;
  let stamped = firstValue.replace(/;\s*received=[^;]*/i, "");
  if (via.params.has("rport")) stamped = stamped.replace(/;\s*rport(=[^;]*)?/i, `;rport=${port}`);
  stamped += `;received=${address}`;
  const offset = line.indexOf(firstValue);
  return text.slice(0, valueStart + offset) + stamped + text.slice(valueStart + offset + firstValue.length);
}

const LWS = "[ \\t]*";
const TOP_VIA_SENT_BY = new RegExp(
  `^((?:Via|v)${LWS}:${LWS}SIP${LWS}/${LWS}2\\.0${LWS}/${LWS}[A-Za-z]+[ \\t]+)` +
    "(\\[[0-9a-fA-F:.]+\\]|[^\\s;:,]+)(?::(\\d{1,5}))?",
  "im",
);

/**
 * sip.js writes its Via without a port and drops any response whose Via carries one, yet
 * a gateway that listens anywhere but 5060 must say its port there. So outgoing requests
 * get the port added to their (only) Via, and responses have it taken off again.
 */
export function addViaPort(text: string, port: number): string {
  return text.replace(TOP_VIA_SENT_BY, (whole, prefix: string, host: string, existing?: string) =>
    existing === undefined ? `${prefix}${host}:${port}` : whole,
  );
}

export function removeViaPort(text: string, port: number): string {
  return text.replace(TOP_VIA_SENT_BY, (whole, prefix: string, host: string, existing?: string) =>
    existing === String(port) ? `${prefix}${host}` : whole,
  );
}

/** Carries the Request-URI as the caller sent it, since the transport rewrites it for sip.js. */
export const ORIGINAL_URI_HEADER = "Parley-Request-URI";
/** Any copy of that header a sender put in (compiled once: it is applied to every request). */
const FORGED_ORIGINAL_URI = new RegExp(`^${ORIGINAL_URI_HEADER}[ \t]*:.*\r\n`, "gim");

/**
 * sip.js answers 404 to any request whose Request-URI user is not its own contact user, but
 * a gateway takes calls for any number. So the transport addresses every incoming request
 * to `user` and keeps the original in ORIGINAL_URI_HEADER (dropping any copy a sender
 * forged), which is where the gateway reads the dialled number.
 */
export function retarget(text: string, head: SipMessageHead, user: string): string {
  const original = head.requestUri ?? "";
  const lineEnd = text.indexOf("\r\n");
  const rest = text.slice(lineEnd + 2).replace(FORGED_ORIGINAL_URI, "");
  const match = /^(sips?):(?:[^@;?>]*@)?(.*)$/i.exec(original);
  if (!match) return text;
  const startLine = `${head.method} ${match[1]!.toLowerCase()}:${user}@${match[2]} SIP/2.0`;
  return `${startLine}\r\n${ORIGINAL_URI_HEADER}: ${original}\r\n${rest}`;
}

/** A stateless answer to a request that never reaches sip.js (bad input, refused source, flood). */
export function statelessResponse(
  head: SipMessageHead,
  status: number,
  reason: string,
  extraHeaders: string[] = [],
): string {
  const lines = [`SIP/2.0 ${status} ${reason}`];
  for (const via of head.headers.get("via") ?? []) lines.push(`Via: ${via}`);
  lines.push(`From: ${header(head, "from")}`);
  const to = header(head, "to")!;
  lines.push(`To: ${/;\s*tag=/i.test(to) ? to : `${to};tag=${crypto.randomUUID().slice(0, 8)}`}`);
  lines.push(
    `Call-ID: ${header(head, "call-id")}`,
    `CSeq: ${header(head, "cseq")}`,
    ...extraHeaders,
    "Content-Length: 0",
    "",
    "",
  );
  return lines.join("\r\n");
}

/**
 * Splits a TCP byte stream into SIP messages by Content-Length (RFC 3261 18.3). Returns
 * the complete messages and the bytes left over; throws when the stream cannot be framed.
 */
export function frameStream(buffer: Buffer, maxBytes: number): { messages: string[]; rest: Buffer } {
  const messages: string[] = [];
  let rest = buffer;
  for (;;) {
    // Keep-alive CRLFs (RFC 5626) sit between messages.
    let skip = 0;
    while (rest[skip] === 13 || rest[skip] === 10) skip++;
    rest = rest.subarray(skip);
    const end = rest.indexOf("\r\n\r\n");
    if (end < 0) {
      if (rest.length > maxBytes) throw new MalformedMessage("headers exceed the size limit");
      return { messages, rest };
    }
    const headers = rest.subarray(0, end + 2).toString("latin1");
    const lengthMatch = /\r\n(?:content-length|l)[ \t]*:[ \t]*(\d+)/i.exec(headers);
    if (!lengthMatch) throw new MalformedMessage("message without Content-Length on a stream");
    const total = end + 4 + Number(lengthMatch[1]);
    if (total > maxBytes) throw new MalformedMessage("message exceeds the size limit");
    if (rest.length < total) return { messages, rest };
    messages.push(rest.subarray(0, total).toString());
    rest = rest.subarray(total);
  }
}
