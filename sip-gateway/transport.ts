/**
 * SIP over UDP and TCP on Bun's sockets, for sip.js (which ships only a WebSocket
 * transport for browsers). An endpoint owns the socket (udp-endpoint.ts, tcp-endpoint.ts):
 * it checks what arrives, stamps the top Via with the real source, turns away what must not
 * reach the user agent (garbage, refused sources, floods), and routes what sip.js sends:
 * responses by the top Via (received/rport), requests by the Request-URI. This file holds
 * what every endpoint shares and the sip.js transport that sits on one.
 */
import { EmitterImpl, type Transport, TransportState } from "sip.js";
import type { SipConfig } from "../src/core/config";
import { log } from "../src/core/log";
import type { SourceGuard } from "./guard";
import {
  addViaPort,
  type Destination,
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

/** RFC 3261 timer T1: the first retransmission interval, and 64 × T1 the life of a transaction. */
export const T1 = 500;
export const TRANSACTION_LIFETIME_MS = 64 * T1;

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
      return head?.kind === "request" && head.method !== "ACK"
        ? statelessResponse(head, 513, "Message Too Large")
        : null;
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

  /**
   * sip.js's parser is stricter than ours in places; what it rejects it only logs, what it throws on must not escape.
   */
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

export function topBranch(head: SipMessageHead): string | undefined {
  return parseVia(header(head, "via") ?? "")?.params.get("branch");
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
