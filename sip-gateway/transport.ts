/**
 * SIP over UDP and TCP on Bun's sockets, for sip.js (which ships only a WebSocket
 * transport for browsers). An endpoint owns the socket: it frames and checks what
 * arrives, stamps the top Via with the real source, turns away what must not reach
 * the user agent (garbage, refused sources, floods), and routes what sip.js sends:
 * responses by the top Via (received/rport), requests by the Request-URI.
 *
 * sip.js assumes a reliable transport and so never retransmits its own requests; the
 * UDP endpoint does that (RFC 3261 timers A/E: T1 doubling to T2, for 64 × T1).
 */
import type { Socket, TCPSocketListener, udp } from "bun";
import { EmitterImpl, type Transport, TransportState } from "sip.js";
import type { SipConfig } from "../src/config";
import { log } from "../src/core/log";
import type { SourceGuard } from "./guard";
import {
  addViaPort,
  type Destination,
  frameStream,
  header,
  MalformedMessage,
  parseHead,
  parseVia,
  removeViaPort,
  requestDestination,
  retarget,
  responseDestination,
  type SipMessageHead,
  stampReceived,
  statelessResponse,
} from "./message";

const T1 = 500;
const T2 = 4_000;
const TRANSACTION_LIFETIME_MS = 64 * T1;
/** TCP connections with no traffic for this long are closed (trunks send keep-alives far more often). */
const TCP_IDLE_SECONDS = 600;

export type Protocol = "UDP" | "TCP" | "TLS";
/** The user part of the gateway's Contact; every incoming request is addressed to it (see `retarget`). */
export const CONTACT_USER = "parley";

export interface EndpointStats {
  received: number;
  dropped: number;
  refused: number;
}

export abstract class SipEndpoint {
  abstract readonly protocol: Protocol;
  abstract readonly port: number;
  /** Set by the transport: hands a checked message to sip.js. */
  deliver: (message: string) => void = () => {};
  readonly stats: EndpointStats = { received: 0, dropped: 0, refused: 0 };

  constructor(
    protected readonly settings: SipConfig,
    protected readonly guard: SourceGuard,
  ) {}

  abstract send(message: string): Promise<void>;
  abstract close(): void;

  /**
   * Checks one received message and passes it on. Returns a stateless answer to send back
   * when the message is refused but answerable; null when it was delivered or dropped.
   */
  protected accept(text: string, address: string, port: number): string | null {
    this.stats.received++;
    if (Buffer.byteLength(text) > this.settings.maxMessageBytes) {
      this.stats.dropped++;
      const head = tryParseHead(text);
      return head?.kind === "request" && head.method !== "ACK" ? statelessResponse(head, 513, "Message Too Large") : null;
    }
    let head: SipMessageHead;
    try {
      head = parseHead(text);
    } catch (error) {
      this.stats.dropped++;
      log.debug({ address, port, reason: (error as Error).message }, "sip: malformed message dropped");
      return null;
    }
    if (head.kind === "response") {
      this.onResponse(head);
      return this.hand(removeViaPort(text, this.port));
    }
    const verdict = this.guard.admit(head, address);
    if (verdict !== "pass") {
      this.stats.refused++;
      if (verdict === "drop" || head.method === "ACK") return null;
      return statelessResponse(head, verdict.status, verdict.reason, verdict.headers);
    }
    const declared = header(head, "content-length");
    if (declared !== undefined && (!/^\d+$/.test(declared) || Number(declared) > Buffer.byteLength(head.body))) {
      this.stats.dropped++;
      return head.method === "ACK" ? null : statelessResponse(head, 400, "Bad Content-Length");
    }
    this.noteRequest(head, address, port);
    return this.hand(retarget(stampReceived(text, address, port), head, CONTACT_USER));
  }

  /** sip.js's parser is stricter than ours in places; what it rejects it only logs, what it throws on must not escape. */
  private hand(text: string): null {
    try {
      this.deliver(text);
    } catch (error) {
      this.stats.dropped++;
      log.warn({ err: (error as Error).message }, "sip: user agent could not take a message");
    }
    return null;
  }

  protected onResponse(_head: SipMessageHead): void {}
  protected noteRequest(_head: SipMessageHead, _address: string, _port: number): void {}

  /** Parses what sip.js hands over and says where it goes; a request gets this endpoint's port in its Via. */
  protected outgoing(text: string): { message: string; head: SipMessageHead; destination: Destination } {
    const head = parseHead(text);
    const message = head.kind === "request" ? addViaPort(text, this.port) : text;
    const destination = head.kind === "response" ? responseDestination(head) : requestDestination(head);
    if (!destination) throw new MalformedMessage(`no destination for outgoing ${head.kind}`);
    return { message, head, destination };
  }
}

function tryParseHead(text: string): SipMessageHead | undefined {
  try {
    return parseHead(text.slice(0, 8_192).includes("\r\n\r\n") ? text : `${text}\r\n\r\n`);
  } catch {
    return undefined;
  }
}

function topBranch(head: SipMessageHead): string | undefined {
  return parseVia(header(head, "via") ?? "")?.params.get("branch");
}

interface PendingRequest {
  timer: ReturnType<typeof setTimeout>;
  startedAt: number;
}

export class UdpEndpoint extends SipEndpoint {
  readonly protocol = "UDP";
  private readonly pending = new Map<string, PendingRequest>();

  private constructor(
    settings: SipConfig,
    guard: SourceGuard,
    private readonly socket: udp.Socket<"buffer">,
  ) {
    super(settings, guard);
  }

  static async open(settings: SipConfig, guard: SourceGuard, port: number): Promise<UdpEndpoint> {
    let endpoint: UdpEndpoint | undefined;
    const socket = await Bun.udpSocket({
      hostname: settings.bindAddress,
      port,
      socket: {
        data(_socket, data, remotePort, address, flags) {
          if (!endpoint) return;
          if (flags.truncated) {
            endpoint.stats.received++;
            endpoint.stats.dropped++;
            return;
          }
          const answer = endpoint.accept(data.toString(), address, remotePort);
          if (answer) endpoint.sendDatagram(answer, { host: address, port: remotePort });
        },
        // An ICMP unreachable from a peer that went away lands here, sometimes without an error object.
        error(_socket, error?: Error) {
          log.debug({ err: error?.message }, "sip: udp socket error");
        },
      },
    });
    endpoint = new UdpEndpoint(settings, guard, socket);
    return endpoint;
  }

  get port(): number {
    return this.socket.port;
  }

  /** UDP is fire and forget: a peer that went away (ICMP unreachable) is not the sender's error. */
  private sendDatagram(message: string, destination: Destination): void {
    try {
      this.socket.send(message, destination.port, destination.host);
    } catch (error) {
      log.debug({ err: (error as Error).message, to: destination }, "sip: udp send failed");
    }
  }

  async send(text: string): Promise<void> {
    const { message, head, destination } = this.outgoing(text);
    this.sendDatagram(message, destination);
    if (head.kind === "request" && head.method !== "ACK") this.retransmit(head, message, destination);
  }

  private retransmit(head: SipMessageHead, message: string, destination: Destination): void {
    const branch = topBranch(head);
    if (!branch) return;
    const key = `${branch}|${head.method}`;
    const previous = this.pending.get(key);
    if (previous) clearTimeout(previous.timer);
    const startedAt = Date.now();
    let interval = T1;
    const again = () => {
      if (Date.now() - startedAt >= TRANSACTION_LIFETIME_MS || this.socket.closed) {
        this.pending.delete(key);
        return;
      }
      this.sendDatagram(message, destination);
      interval = Math.min(interval * 2, T2);
      pending.timer = setTimeout(again, interval);
    };
    const pending: PendingRequest = { startedAt, timer: setTimeout(again, interval) };
    this.pending.set(key, pending);
  }

  protected override onResponse(head: SipMessageHead): void {
    const branch = topBranch(head);
    if (!branch) return;
    const key = `${branch}|${head.method}`;
    const pending = this.pending.get(key);
    if (!pending) return;
    // A provisional answer stops INVITE retransmission (timer A) but a non-INVITE request waits for a final one.
    if (head.method === "INVITE" || (head.status ?? 0) >= 200) {
      clearTimeout(pending.timer);
      this.pending.delete(key);
    }
  }

  close(): void {
    for (const pending of this.pending.values()) clearTimeout(pending.timer);
    this.pending.clear();
    this.socket.close();
  }
}

interface Connection {
  buffer: Buffer;
  key: string;
  /** Known addresses of the peer's listening side (Via sent-by, Contact), for requests sent back to it. */
  aliases: Set<string>;
}

const keyOf = (host: string, port: number) => `${host.replace(/^\[|\]$/g, "")}:${port}`;

/** SIP over TCP, or over TLS when opened with a certificate (the same framing on a TLS stream). */
export class TcpEndpoint extends SipEndpoint {
  private listener!: TCPSocketListener<Connection>;
  private readonly connections = new Map<string, Socket<Connection>>();
  private readonly aliases = new Map<string, Socket<Connection>>();
  /** Which connection a request arrived on, by its top Via branch, so its responses go back the same way. */
  private readonly requestConnections = new Map<string, { socket: Socket<Connection>; at: number }>();
  private readonly sweeper: ReturnType<typeof setInterval>;

  private constructor(
    settings: SipConfig,
    guard: SourceGuard,
    readonly protocol: "TCP" | "TLS",
  ) {
    super(settings, guard);
    this.sweeper = setInterval(() => {
      const horizon = Date.now() - TRANSACTION_LIFETIME_MS - 10_000;
      for (const [branch, entry] of this.requestConnections) if (entry.at < horizon) this.requestConnections.delete(branch);
    }, 10_000);
    this.sweeper.unref?.();
  }

  static open(settings: SipConfig, guard: SourceGuard, port: number, tls?: { certPath: string; keyPath: string }): TcpEndpoint {
    const endpoint = new TcpEndpoint(settings, guard, tls ? "TLS" : "TCP");
    endpoint.listener = Bun.listen<Connection>({
      hostname: settings.bindAddress,
      port,
      socket: endpoint.handlers(),
      ...(tls ? { tls: { cert: Bun.file(tls.certPath), key: Bun.file(tls.keyPath) } } : {}),
    });
    return endpoint;
  }

  get port(): number {
    return this.listener.port;
  }

  private handlers() {
    return {
      open: (socket: Socket<Connection>) => {
        if (this.connections.size >= this.settings.maxTcpConnections) {
          this.stats.refused++;
          socket.end();
          return;
        }
        const key = keyOf(socket.remoteAddress, socket.remotePort);
        socket.data = { buffer: Buffer.alloc(0), key, aliases: new Set() };
        socket.timeout(TCP_IDLE_SECONDS);
        this.connections.set(key, socket);
      },
      data: (socket: Socket<Connection>, chunk: Buffer) => this.onData(socket, chunk),
      close: (socket: Socket<Connection>) => this.forget(socket),
      error: (socket: Socket<Connection>, error: Error) => {
        log.debug({ err: error.message }, "sip: tcp connection error");
        this.forget(socket);
      },
      timeout: (socket: Socket<Connection>) => {
        socket.end();
      },
    };
  }

  private onData(socket: Socket<Connection>, chunk: Buffer): void {
    const connection = socket.data;
    if (!connection) return;
    let framed: ReturnType<typeof frameStream>;
    try {
      framed = frameStream(Buffer.concat([connection.buffer, chunk]), this.settings.maxMessageBytes);
    } catch (error) {
      // A stream that cannot be framed cannot be resynchronised either: drop the connection.
      this.stats.received++;
      this.stats.dropped++;
      log.debug({ peer: connection.key, reason: (error as Error).message }, "sip: unframeable tcp stream closed");
      socket.end();
      return;
    }
    connection.buffer = framed.rest;
    for (const message of framed.messages) {
      const answer = this.accept(message, socket.remoteAddress, socket.remotePort);
      if (answer) socket.write(answer);
    }
  }

  private forget(socket: Socket<Connection>): void {
    const connection = socket.data;
    if (!connection) return;
    if (this.connections.get(connection.key) === socket) this.connections.delete(connection.key);
    for (const alias of connection.aliases) if (this.aliases.get(alias) === socket) this.aliases.delete(alias);
  }

  protected override noteRequest(head: SipMessageHead, address: string, port: number): void {
    const socket = this.connections.get(keyOf(address, port));
    if (!socket?.data) return;
    const branch = topBranch(head);
    if (branch) this.requestConnections.set(branch, { socket, at: Date.now() });
    const via = parseVia(header(head, "via") ?? "");
    const contact = /<?sips?:(?:[^@;>]*@)?(\[[0-9a-fA-F:.]+\]|[^;:>?]+)(?::(\d{1,5}))?/.exec(header(head, "contact") ?? "");
    const aliases = [via && keyOf(via.host, via.port ?? 5060), contact && keyOf(contact[1]!, contact[2] ? Number(contact[2]) : 5060)];
    for (const alias of aliases) {
      if (!alias || socket.data.aliases.has(alias)) continue;
      socket.data.aliases.add(alias);
      this.aliases.set(alias, socket);
    }
  }

  async send(text: string): Promise<void> {
    const { message, head, destination } = this.outgoing(text);
    const key = keyOf(destination.host, destination.port);
    let socket: Socket<Connection> | undefined;
    if (head.kind === "response") {
      const branch = topBranch(head);
      socket = branch ? this.requestConnections.get(branch)?.socket : undefined;
    }
    socket ??= this.connections.get(key) ?? this.aliases.get(key);
    if (socket?.readyState !== 1) socket = await this.connect(destination);
    socket.write(message);
  }

  private async connect(destination: Destination): Promise<Socket<Connection>> {
    const key = keyOf(destination.host, destination.port);
    const socket = await Bun.connect<Connection>({
      hostname: destination.host,
      port: destination.port,
      socket: this.handlers(),
      // Connections the gateway opens over TLS check the peer's certificate.
      ...(this.protocol === "TLS" ? { tls: true } : {}),
    });
    socket.data ??= { buffer: Buffer.alloc(0), key, aliases: new Set() };
    this.connections.set(key, socket);
    return socket;
  }

  close(): void {
    clearInterval(this.sweeper);
    for (const socket of this.connections.values()) socket.end();
    this.connections.clear();
    this.aliases.clear();
    this.listener.stop(true);
  }
}

/** The sip.js side of an endpoint: sip.js constructs it with `transportOptions = { endpoint }`. */
export class EndpointTransport implements Transport {
  readonly stateChange = new EmitterImpl<TransportState>();
  state = TransportState.Disconnected;
  onConnect: (() => void) | undefined;
  onDisconnect: ((error?: Error) => void) | undefined;
  onMessage: ((message: string) => void) | undefined;
  private readonly endpoint: SipEndpoint;

  constructor(_logger: unknown, options: { endpoint: SipEndpoint }) {
    this.endpoint = options.endpoint;
    this.endpoint.deliver = (message) => this.onMessage?.(message);
  }

  get protocol(): string {
    return this.endpoint.protocol;
  }

  private transition(state: TransportState): void {
    this.state = state;
    this.stateChange.emit(state);
  }

  async connect(): Promise<void> {
    this.transition(TransportState.Connected);
    this.onConnect?.();
  }

  async disconnect(): Promise<void> {
    this.transition(TransportState.Disconnected);
    this.onDisconnect?.();
  }

  async dispose(): Promise<void> {
    if (this.state === TransportState.Connected) await this.disconnect();
  }

  isConnected(): boolean {
    return this.state === TransportState.Connected;
  }

  send(message: string): Promise<void> {
    return this.endpoint.send(message).catch((error: Error) => {
      log.warn({ err: error.message }, "sip: could not send");
      throw error;
    });
  }
}
