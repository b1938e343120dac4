/**
 * SIP over UDP. sip.js assumes a reliable transport and so never retransmits its own
 * requests; this endpoint does that (RFC 3261 timers A/E: T1 doubling to T2, for 64 × T1).
 */
import type { udp } from "bun";
import type { SipConfig } from "../src/core/config";
import { log } from "../src/core/log";
import type { SourceGuard } from "./guard";
import type { Destination, SipMessageHead } from "./message";
import { SipEndpoint, T1, TRANSACTION_LIFETIME_MS, topBranch } from "./transport";

const T2 = 4_000;

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
