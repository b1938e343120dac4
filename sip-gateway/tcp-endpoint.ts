/** SIP over TCP, or over TLS when opened with a certificate: messages framed by Content-Length on the stream. */
import type { Socket, TCPSocketListener } from "bun";
import type { SipConfig } from "../src/core/config";
import { log } from "../src/core/log";
import type { SourceGuard } from "./guard";
import { type Destination, frameStream, header, parseVia, type SipMessageHead } from "./message";
import { SipEndpoint, TRANSACTION_LIFETIME_MS, topBranch } from "./transport";

/** TCP connections with no traffic for this long are closed (trunks send keep-alives far more often). */
const TCP_IDLE_SECONDS = 600;

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
      for (const [branch, entry] of this.requestConnections)
        if (entry.at < horizon) this.requestConnections.delete(branch);
    }, 10_000);
    this.sweeper.unref?.();
  }

  static open(
    settings: SipConfig,
    guard: SourceGuard,
    port: number,
    tls?: { certPath: string; keyPath: string },
  ): TcpEndpoint {
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
    const contact = /<?sips?:(?:[^@;>]*@)?(\[[0-9a-fA-F:.]+\]|[^;:>?]+)(?::(\d{1,5}))?/.exec(
      header(head, "contact") ?? "",
    );
    const aliases = [
      via && keyOf(via.host, via.port ?? 5060),
      contact && keyOf(contact[1]!, contact[2] ? Number(contact[2]) : 5060),
    ];
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
