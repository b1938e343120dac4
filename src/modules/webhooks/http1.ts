/**
 * The webhooks worker's HTTP/1.1 client: a POST on a connection kept open per destination and
 * reused by the next attempt, answered with the status and the first bytes of the body.
 *
 * Why not fetch: sending is most of a delivery's cost in the worker, and on loopback fetch costs
 * its caller 38–49 µs of CPU a request (Request, Headers and Response objects, the body's
 * stream, the hand-over to fetch's own thread) where a request written on a Bun TCP socket
 * and its answer's head read back costs 17–20 µs (docs/benchmarks.md, webhooks). Node's own
 * client library (undici) is no way out on Bun, which answers `undici` imports with a partial
 * stand-in of its own.
 *
 * What a webhook needs and no more: no redirects (a 3xx is an answer like any other), no
 * compression, proxies, pipelining or HTTP/2. It connects to the address it is given, the one
 * the SSRF check resolved and allowed, so a name cannot be rebound in between; on https the
 * certificate is checked (chain, and the URL's host name, which also goes as SNI) before
 * anything is written. An answer is read to its end (Content-Length, chunked, or the
 * connection's close) unless its body outgrows what the log keeps: then the connection is
 * closed rather than drained. A connection goes back to its destination's idle list only after
 * a whole, well-framed answer that did not ask to close; one idle for IDLE_MS is closed (below
 * the 5 s keep-alive of common servers, so that they rarely close one under a request). When
 * a reused connection ends before any byte of the answer, the request goes once more on a new
 * one: the receiver closed it while idle, and at-least-once delivery allows the rare resend.
 *
 * Longer than 400 lines on purpose: a connection's life (connect, TLS check, write, read the
 * answer's framing, keep or close) is one state machine over a socket's callbacks, which reads
 * and is checked whole (test/modules/webhooks-http1.test.ts).
 */
import type { Socket } from "bun";

/** Where a request goes: the checked address to connect to, and the names the request carries. */
export interface Destination {
  /** The IP address to connect to, without brackets. */
  address: string;
  port: number;
  tls: boolean;
  /** The name the certificate must hold (and the SNI), on https. */
  serverName: string;
  /** The Host header. */
  host: string;
  /** The request target: path and query. */
  target: string;
}

export interface Answer {
  status: number;
  /** The body's first `keep` bytes, as UTF-8. */
  body: string;
}

/** An attempt that got no answer within its time. */
export class AnswerTimeout extends Error {
  override name = "TimeoutError";
}

/** Closed when idle this long. */
const IDLE_MS = 4_000;
/** An answer's head (status line and headers) beyond this is refused. */
const HEAD_LIMIT = 16 * 1024;
const CRLF = Buffer.from("\r\n");
const HEAD_END = Buffer.from("\r\n\r\n");

type Framing = "none" | "length" | "chunked" | "close";

/** One request's answer, read as it arrives. */
class Exchange {
  private pending: Buffer = Buffer.alloc(0);
  private state: "head" | "length" | "size" | "data" | "data-end" | "trailer" | "close" = "head";
  private remaining = 0;
  private readonly parts: Buffer[] = [];
  private kept = 0;
  status = 0;
  keepAlive = false;
  /** Any byte of an answer came. */
  heard = false;
  done = false;

  constructor(
    private readonly keep: number,
    private readonly settle: (outcome: { answer?: Answer; error?: Error; reusable: boolean }) => void,
  ) {}

  feed(chunk: Buffer): void {
    if (this.done) return;
    this.heard = true;
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    try {
      this.parse();
    } catch (error) {
      // A status already read is the answer; what follows it could not be framed, so the connection goes.
      if (this.status > 0) this.finish(false);
      else this.fail(error as Error);
    }
  }

  /** The connection ended: the end of a body read until the close, or an answer cut short. */
  closed(error?: Error): void {
    // With the status read it is the answer, its body as far as it came.
    if (this.status > 0) this.finish(false);
    else this.fail(error ?? new Error("the connection closed before an answer"));
  }

  fail(error: Error): void {
    if (this.done) return;
    this.done = true;
    this.settle({ error, reusable: false });
  }

  private finish(reusable: boolean): void {
    if (this.done) return;
    this.done = true;
    const body = Buffer.concat(this.parts).subarray(0, this.keep).toString("utf8");
    // Bytes past the end of the answer were never asked for: the connection is not trusted again.
    this.settle({ answer: { status: this.status, body }, reusable: reusable && this.pending.length === 0 });
  }

  private body(bytes: Buffer): void {
    if (this.kept < this.keep) {
      this.parts.push(bytes);
      this.kept += bytes.length;
    }
  }

  private parse(): void {
    for (;;) {
      switch (this.state) {
        case "head": {
          const end = this.pending.indexOf(HEAD_END);
          if (end < 0) {
            if (this.pending.length > HEAD_LIMIT) throw new Error(`the answer's head is over ${HEAD_LIMIT} bytes`);
            return;
          }
          const framing = this.head(this.pending.subarray(0, end).toString("latin1"));
          this.pending = this.pending.subarray(end + 4);
          if (framing === undefined) continue; // an interim 1xx answer: the real one follows
          if (framing === "none") {
            this.finish(this.keepAlive);
            return;
          }
          this.state = framing === "chunked" ? "size" : framing;
          if (framing === "length" && this.remaining === 0) {
            this.finish(this.keepAlive);
            return;
          }
          continue;
        }
        case "length":
        case "data": {
          if (this.pending.length === 0) return;
          const taken = this.pending.subarray(0, this.remaining);
          this.body(taken);
          this.remaining -= taken.length;
          this.pending = this.pending.subarray(taken.length);
          if (this.remaining > 0) {
            this.outgrown();
            return;
          }
          if (this.state === "length") {
            this.finish(this.keepAlive);
            return;
          }
          this.state = "data-end";
          continue;
        }
        case "data-end": {
          if (this.pending.length < 2) return;
          if (this.pending[0] !== 13 || this.pending[1] !== 10) throw new Error("a chunk does not end in CRLF");
          this.pending = this.pending.subarray(2);
          this.state = "size";
          continue;
        }
        case "size":
        case "trailer": {
          const end = this.pending.indexOf(CRLF);
          if (end < 0) {
            if (this.pending.length > HEAD_LIMIT) throw new Error("a chunk's size line or trailer is too long");
            this.outgrown();
            return;
          }
          const line = this.pending.subarray(0, end).toString("latin1");
          this.pending = this.pending.subarray(end + 2);
          if (this.state === "trailer") {
            if (line === "") {
              this.finish(this.keepAlive);
              return;
            }
            continue;
          }
          const size = line.split(";", 1)[0]!.trim();
          if (!/^[0-9a-fA-F]{1,8}$/.test(size)) throw new Error(`"${line}" is not a chunk size`);
          this.remaining = Number.parseInt(size, 16);
          this.state = this.remaining === 0 ? "trailer" : "data";
          continue;
        }
        case "close":
          this.body(this.pending);
          this.pending = Buffer.alloc(0);
          this.outgrown();
          return;
      }
    }
  }

  /** Once the log has what it keeps, the rest is not read: the connection closes instead. */
  private outgrown(): void {
    if (this.kept >= this.keep) this.finish(false);
  }

  /** Reads a head: undefined for an interim (1xx) answer, else how the body is framed. */
  private head(text: string): Framing | undefined {
    const lines = text.split("\r\n");
    const status = /^HTTP\/1\.([01]) (\d{3})(?: |$)/.exec(lines[0]!);
    if (!status) throw new Error("the answer is not HTTP/1");
    const code = Number(status[2]);
    let length: number | undefined;
    let chunked = false;
    let connection = "";
    for (let i = 1; i < lines.length; i++) {
      const colon = lines[i]!.indexOf(":");
      if (colon <= 0) throw new Error("the answer's head holds a line that is not a header");
      const name = lines[i]!.slice(0, colon).trim().toLowerCase();
      const value = lines[i]!.slice(colon + 1).trim();
      if (name === "content-length") {
        if (!/^\d{1,15}$/.test(value) || (length !== undefined && length !== Number(value)))
          throw new Error("the answer's Content-Length is not one number");
        length = Number(value);
      } else if (name === "transfer-encoding") chunked = /(?:^|,)\s*chunked\s*$/i.test(value);
      else if (name === "connection") connection += `,${value.toLowerCase()}`;
    }
    if (code === 101) throw new Error("the receiver switched protocols");
    if (code < 200) return undefined;
    this.status = code;
    this.keepAlive =
      status[1] === "1" ? !/(?:^|,)\s*close\s*(?:,|$)/.test(connection) : /(?:^|,)\s*keep-alive/.test(connection);
    if (code === 204 || code === 304) return "none";
    if (chunked) return "chunked";
    if (length !== undefined) {
      this.remaining = length;
      return "length";
    }
    this.keepAlive = false;
    return "close";
  }
}

/** A connection to one destination, and the exchange on it if a request is out. */
class Connection {
  socket?: Socket<Connection>;
  exchange?: Exchange;
  /** The part of a request the socket did not take yet. */
  unsent?: Buffer;
  idleSince = 0;
  closed = false;
  ready!: Promise<void>;
  private opened!: () => void;
  private refused!: (error: Error) => void;

  constructor(
    readonly key: string,
    readonly tls: boolean,
  ) {
    this.ready = new Promise((resolve, reject) => {
      this.opened = resolve;
      this.refused = reject;
    });
    // Awaited by the one request that opens it; a failure before then is read there.
    this.ready.catch(() => {});
  }

  open(): void {
    this.opened();
  }

  /** The connection failed or ended: it never opens now, and an answer in progress ends here. */
  lost(error?: Error): void {
    this.refused(error ?? new Error("the connection closed before it opened"));
    this.exchange?.closed(error);
  }

  /** The attempt's time is up: whatever it was waiting for fails with `error`, and the connection goes. */
  expire(error: Error): void {
    this.refused(error);
    this.exchange?.fail(error);
    this.end();
  }

  /** Writes `bytes`, `length` of them in UTF-8; what the socket does not take now goes once it drains. */
  write(bytes: string | Buffer, length: number): void {
    const written = this.socket!.write(bytes);
    if (written >= 0 && written < length)
      this.unsent = (typeof bytes === "string" ? Buffer.from(bytes) : bytes).subarray(written);
  }

  drain(): void {
    if (!this.unsent) return;
    const unsent = this.unsent;
    this.unsent = undefined;
    this.write(unsent, unsent.length);
  }

  end(): void {
    this.closed = true;
    this.socket?.terminate();
  }
}

const idle = new Map<string, Connection[]>();
let sweeping: ReturnType<typeof setInterval> | undefined;

/** Closes connections idle for IDLE_MS; stops looking once none is left. */
function sweepIdle(): void {
  const now = Date.now();
  for (const [key, list] of idle) {
    const kept = list.filter((connection) => {
      if (now - connection.idleSince < IDLE_MS) return true;
      connection.end();
      return false;
    });
    if (kept.length === 0) idle.delete(key);
    else idle.set(key, kept);
  }
  if (idle.size === 0 && sweeping) {
    clearInterval(sweeping);
    sweeping = undefined;
  }
}

function parkIdle(connection: Connection): void {
  connection.exchange = undefined;
  connection.idleSince = Date.now();
  // An idle connection keeps no process alive.
  connection.socket!.unref();
  const list = idle.get(connection.key);
  if (list) list.push(connection);
  else idle.set(connection.key, [connection]);
  sweeping ??= setInterval(sweepIdle, IDLE_MS / 2);
  sweeping.unref();
}

function takeIdle(key: string): Connection | undefined {
  const list = idle.get(key);
  while (list && list.length > 0) {
    const connection = list.pop()!;
    if (!connection.closed && Date.now() - connection.idleSince < IDLE_MS) {
      connection.socket!.ref();
      return connection;
    }
    connection.end();
  }
  return undefined;
}

/** One set of handlers for every socket, each finding its own connection in `socket.data`. */
const handlers = {
  open(socket: Socket<Connection>) {
    socket.data.socket = socket;
    // Its attempt timed out while it connected.
    if (socket.data.closed) {
      socket.terminate();
      return;
    }
    // On https nothing is written before the certificate is checked.
    if (!socket.data.tls) socket.data.open();
  },
  handshake(socket: Socket<Connection>, success: boolean, error: Error | null) {
    if (success) {
      socket.data.open();
      return;
    }
    const reason = (error as (Error & { code?: string }) | null)?.code ?? error?.message ?? "refused";
    socket.data.lost(new Error(`the TLS handshake failed: ${reason}`));
    socket.data.end();
  },
  data(socket: Socket<Connection>, chunk: Buffer) {
    // Bytes on an idle connection answer nothing asked: it is not used again.
    if (socket.data.exchange) socket.data.exchange.feed(chunk);
    else socket.data.end();
  },
  drain(socket: Socket<Connection>) {
    socket.data.drain();
  },
  close(socket: Socket<Connection>, error?: Error) {
    socket.data.closed = true;
    socket.data.lost(error);
  },
  error(socket: Socket<Connection>, error: Error) {
    socket.data.lost(error);
  },
};

/** A new connection to `destination`, opening; its `ready` says when it may carry a request. */
function open(destination: Destination, key: string): Connection {
  const connection = new Connection(key, destination.tls);
  Bun.connect<Connection>({
    hostname: destination.address,
    port: destination.port,
    tls: destination.tls ? { serverName: destination.serverName } : undefined,
    data: connection,
    socket: handlers,
  }).catch((error: Error & { code?: string }) => {
    connection.lost(new Error(`could not connect to ${destination.host}: ${error.code ?? error.message}`));
  });
  return connection;
}

/**
 * POSTs `body` with `headers` (lower-case names; Host and Content-Length are added) to
 * `destination`, and answers its status and the body's first `keep` bytes; rejects with an
 * AnswerTimeout when no whole answer came within `timeoutMs`, or with an Error saying why the
 * request got no answer (a new connection not open within `connectTimeoutMs` among them).
 */
export async function post(
  destination: Destination,
  headers: Record<string, string>,
  body: string,
  timeoutMs: number,
  keep: number,
  connectTimeoutMs = timeoutMs,
): Promise<Answer> {
  const key = `${destination.tls ? "tls" : "tcp"} ${destination.address} ${destination.port} ${destination.serverName}`;
  let head = `POST ${destination.target} HTTP/1.1\r\nhost: ${destination.host}\r\n`;
  for (const name in headers) head += `${name}: ${headers[name]}\r\n`;
  const bodyBytes = Buffer.byteLength(body);
  head += `content-length: ${bodyBytes}\r\n\r\n`;
  const request = head + body;
  // The head is ASCII (the URL's host and path come encoded, the headers are Parley's own): a character a byte.
  const length = head.length + bodyBytes;
  let current: Connection | undefined;
  let expired = false;
  // One timer for the whole attempt, connecting included: it ends the connection in use, which cannot carry
  // another request after an answer cut short.
  const timer = setTimeout(() => {
    expired = true;
    current?.expire(new AnswerTimeout(`no answer within ${timeoutMs} ms`));
  }, timeoutMs);
  try {
    for (let tries = 0; ; tries++) {
      const reused = tries === 0 ? takeIdle(key) : undefined;
      const connection = reused ?? open(destination, key);
      current = connection;
      if (!reused) {
        const connecting = setTimeout(
          () => connection.expire(new Error(`could not connect within ${connectTimeoutMs} ms`)),
          connectTimeoutMs,
        );
        try {
          await connection.ready;
        } finally {
          clearTimeout(connecting);
        }
      }
      const outcome = await exchange(connection, request);
      if (outcome.answer) {
        if (outcome.reusable && !connection.closed) parkIdle(connection);
        else connection.end();
        return outcome.answer;
      }
      connection.end();
      // A kept connection the receiver closed while it idled: once more, on a new one.
      if (expired || !reused || outcome.heard) throw outcome.error;
    }
  } finally {
    clearTimeout(timer);
  }

  function exchange(
    connection: Connection,
    request: string,
  ): Promise<{ answer?: Answer; error?: Error; reusable: boolean; heard: boolean }> {
    return new Promise((resolve) => {
      const exchange: Exchange = new Exchange(keep, (outcome) => resolve({ ...outcome, heard: exchange.heard }));
      connection.exchange = exchange;
      if (connection.closed) exchange.closed();
      else connection.write(request, length);
    });
  }
}
