/**
 * The server-side session description handler sip.js asks for on every call: it answers
 * an SDP offer with G.711 (PCMU or PCMA, the caller's preference) plus telephone-event,
 * or makes that offer itself when the INVITE came without one, and opens the call's RTP
 * socket. Until the call is bridged to a media endpoint (see bridge.ts) the socket is read
 * for RFC 4733 telephone-events (DTMF) and everything else is dropped; once bridged, every
 * packet is relayed unchanged to the endpoint's side.
 */
import type { udp } from "bun";
import type { BodyAndContentType, Session, SessionDescriptionHandler, SessionDescriptionHandlerFactory } from "sip.js";
import type { SipConfig } from "../src/core/config";
import { log } from "../src/core/log";

export const G711 = { 0: "PCMU", 8: "PCMA" } as const;
const TELEPHONE_EVENT_PT = 101;
const DTMF_EVENTS = "0123456789*#ABCD";

export class UnacceptableOffer extends Error {}

export interface RtpAddress {
  address?: string;
  port: number;
}

let rtpSockets = 0;
/** RTP sockets open in this process: the tests' check that ended calls leave none behind. */
export function openRtpSockets(): number {
  return rtpSockets;
}

/** Binds one RTP socket, an even port in SIP_RTP_PORT_MIN..MAX when set. */
export async function bindRtpSocket(
  settings: Pick<SipConfig, "bindAddress" | "rtpPortMin" | "rtpPortMax">,
  onPacket: (packet: Buffer, port: number, address: string) => void,
): Promise<udp.Socket<"buffer">> {
  const { rtpPortMin, rtpPortMax } = settings;
  const handler = {
    data: (_socket: unknown, packet: Buffer, port: number, address: string) => onPacket(packet, port, address),
    // A datagram sent to a peer that has just closed its port comes back as ICMP "port unreachable", which the
    // next receive reports as ECONNREFUSED. RTP is lossy by design: the packet is gone, the call goes on.
    // (As on the SIP socket, the error object is sometimes missing.)
    error: (_socket: unknown, error?: Error) => {
      if ((error as NodeJS.ErrnoException | undefined)?.code !== "ECONNREFUSED") {
        log.warn({ err: error?.message }, "RTP socket error");
      }
    },
  };
  let socket: udp.Socket<"buffer"> | undefined;
  if (rtpPortMin === 0) socket = await Bun.udpSocket({ hostname: settings.bindAddress, port: 0, socket: handler });
  else {
    // RTP takes even ports (RFC 3550); start at a random one so concurrent calls rarely collide.
    const span = Math.floor((rtpPortMax - rtpPortMin) / 2) + 1;
    const first = Math.floor(Math.random() * span);
    for (let i = 0; i < Math.min(span, 64) && !socket; i++) {
      const port = rtpPortMin + ((first + i) % span) * 2;
      try {
        socket = await Bun.udpSocket({ hostname: settings.bindAddress, port, socket: handler });
      } catch {}
    }
    if (!socket) throw new Error("no free RTP port in SIP_RTP_PORT_MIN..SIP_RTP_PORT_MAX");
  }
  rtpSockets++;
  const close = socket.close.bind(socket);
  let closed = false;
  socket.close = () => {
    if (closed) return;
    closed = true;
    rtpSockets--;
    close();
  };
  return socket;
}

/**
 * Where to send a peer's media: the address its packets come from once one has arrived
 * (symmetric RTP, which gets through the peer's NAT), else the address its SDP named.
 */
export class RtpPeer {
  latched: RtpAddress | undefined;
  described: RtpAddress | undefined;

  describe(address: RtpAddress): void {
    if (address.address !== this.described?.address || address.port !== this.described?.port) this.latched = undefined;
    this.described = address;
  }

  heard(port: number, address: string): void {
    if (!this.latched) this.latched = { address, port };
  }

  get target(): RtpAddress | undefined {
    const target = this.latched ?? this.described;
    return target?.address && target.port > 0 && target.address !== "0.0.0.0" ? target : undefined;
  }
}

interface MediaLine {
  media: string;
  port: number;
  proto: string;
  formats: string[];
  attributes: string[];
  connection?: string;
}

interface ParsedSdp {
  connection?: string;
  media: MediaLine[];
}

export interface Negotiated {
  /** Index of the audio m-line answered; the others are refused with port 0. */
  audioIndex: number;
  codec: { payloadType: number; name: string };
  telephoneEvent?: number;
  remote: { address?: string; port: number };
  direction: "sendrecv" | "sendonly" | "recvonly" | "inactive";
}

export function parseSdp(sdp: string): ParsedSdp {
  const parsed: ParsedSdp = { media: [] };
  for (const raw of sdp.split(/\r?\n/)) {
    const line = raw.trim();
    if (line.length < 2 || line[1] !== "=") continue;
    const value = line.slice(2);
    const current = parsed.media[parsed.media.length - 1];
    if (line[0] === "m") {
      const [media = "", port = "", proto = "", ...formats] = value.split(/\s+/);
      parsed.media.push({ media, port: Number.parseInt(port, 10), proto, formats, attributes: [] });
    } else if (line[0] === "c") {
      const address = /^IN IP[46] (\S+)/.exec(value)?.[1];
      if (current) current.connection = address;
      else parsed.connection = address;
    } else if (line[0] === "a" && current) {
      current.attributes.push(value);
    }
  }
  return parsed;
}

function rtpmap(line: MediaLine, payloadType: string): string | undefined {
  const prefix = `rtpmap:${payloadType} `;
  return line.attributes.find((attribute) => attribute.startsWith(prefix))?.slice(prefix.length);
}

function directionOf(line: MediaLine): Negotiated["direction"] {
  for (const direction of ["sendonly", "recvonly", "inactive"] as const)
    if (line.attributes.includes(direction)) return direction;
  return "sendrecv";
}

/**
 * Picks what to answer; throws UnacceptableOffer when no audio line offers G.711 over plain
 * RTP (or, with `only`, that one codec: a bridged call cannot change codec on one leg).
 */
export function negotiate(sdp: string, only?: { payloadType: number }): Negotiated {
  const parsed = parseSdp(sdp);
  for (const [index, line] of parsed.media.entries()) {
    if (line.media !== "audio" || !(line.port > 0) || line.proto !== "RTP/AVP") continue;
    for (const format of line.formats) {
      const map = rtpmap(line, format)?.toUpperCase();
      const payloadType = Number(format);
      const name = map ? map.split("/")[0] : G711[payloadType as keyof typeof G711];
      if (name !== "PCMU" && name !== "PCMA") continue;
      if (only && payloadType !== only.payloadType) continue;
      if (map && !map.startsWith(`${name}/8000`)) continue;
      const event = line.formats.find((candidate) =>
        rtpmap(line, candidate)?.toLowerCase().startsWith("telephone-event/8000"),
      );
      return {
        audioIndex: index,
        codec: { payloadType, name },
        telephoneEvent: event === undefined ? undefined : Number(event),
        remote: { address: line.connection ?? parsed.connection, port: line.port },
        direction: directionOf(line),
      };
    }
  }
  throw new UnacceptableOffer(
    only ? "the offer drops the codec the bridged call carries" : "no G.711 audio over RTP/AVP in the offer",
  );
}

const ANSWER_DIRECTION = {
  sendrecv: "sendrecv",
  sendonly: "recvonly",
  recvonly: "sendonly",
  inactive: "inactive",
} as const;

/** The session lines every SDP the gateway writes starts with (RFC 4566: v, o, s, c, t). */
export function sdpSessionLines(sessionId: number | string, version: number, address: string): string[] {
  const family = address.includes(":") ? "IP6" : "IP4";
  return [
    "v=0",
    `o=parley ${sessionId} ${version} IN ${family} ${address}`,
    "s=parley",
    `c=IN ${family} ${address}`,
    "t=0 0",
  ];
}

/** An answered audio section: the one negotiated codec, telephone-events if offered, the answering direction. */
export function answeredAudioLines(
  port: number,
  negotiated: Pick<Negotiated, "codec" | "telephoneEvent">,
  offeredDirection: Negotiated["direction"],
): string[] {
  const { codec, telephoneEvent } = negotiated;
  return [
    `m=audio ${port} RTP/AVP ${codec.payloadType}${telephoneEvent === undefined ? "" : ` ${telephoneEvent}`}`,
    `a=rtpmap:${codec.payloadType} ${codec.name}/8000`,
    ...(telephoneEvent === undefined
      ? []
      : [`a=rtpmap:${telephoneEvent} telephone-event/8000`, `a=fmtp:${telephoneEvent} 0-15`]),
    "a=ptime:20",
    `a=${ANSWER_DIRECTION[offeredDirection]}`,
  ];
}

export class GatewayMedia implements SessionDescriptionHandler {
  private socket: udp.Socket<"buffer"> | undefined;
  private opening: Promise<udp.Socket<"buffer">> | undefined;
  private readonly sessionId = Math.floor(Math.random() * 1e9);
  private version = 0;
  private offered: ParsedSdp | undefined;
  private ourOffer = false;
  negotiated: Negotiated | undefined;
  /** Set once the call is bridged: relays each packet from the caller to the media endpoint. */
  forward: ((packet: Buffer) => void) | undefined;
  readonly caller = new RtpPeer();
  /** With SIP_MEDIA_RELAY=false, the media endpoint's answer, given to the caller as it is. */
  passthroughAnswer: string | undefined;
  /** The one codec to offer when the INVITE had no SDP and the endpoint has already chosen. */
  offerCodec: { payloadType: number; name: string } | undefined;
  /** Called with each RFC 4733 digit; digits that arrive before it is set wait in `pendingDigits`. */
  private digitListener: ((digit: string) => void) | undefined;
  private readonly pendingDigits: string[] = [];
  private lastPress: string | undefined;
  private lastEnded = false;
  private closed = false;

  constructor(private readonly settings: SipConfig & { advertisedAddress: string }) {}

  set onDigit(listener: (digit: string) => void) {
    this.digitListener = listener;
    for (const digit of this.pendingDigits.splice(0)) listener(digit);
  }

  get rtpPort(): number | undefined {
    return this.socket?.port;
  }

  hasDescription(contentType: string): boolean {
    return contentType.split(";")[0]!.trim().toLowerCase() === "application/sdp";
  }

  async setDescription(sdp: string): Promise<void> {
    if (this.ourOffer) {
      // The answer to the offer in our 200 OK (the INVITE had no SDP): it must pick from what we offered.
      const answer = negotiate(sdp);
      if (!(answer.codec.payloadType in G711)) throw new UnacceptableOffer("answer picked a codec we did not offer");
      this.negotiated = answer;
      this.caller.describe(answer.remote);
      this.ourOffer = false;
      return;
    }
    this.negotiated = negotiate(sdp, this.forward ? this.negotiated?.codec : undefined);
    this.offered = parseSdp(sdp);
    this.caller.describe(this.negotiated.remote);
  }

  /** Relays a packet from the media endpoint to the caller. */
  sendToCaller(packet: Buffer): boolean {
    const target = this.caller.target;
    if (!this.socket || !target) return false;
    return this.socket.send(packet, target.port, target.address!);
  }

  async getDescription(): Promise<BodyAndContentType> {
    if (this.passthroughAnswer) {
      this.offered = undefined;
      return { body: this.passthroughAnswer, contentType: "application/sdp" };
    }
    const socket = await this.open();
    this.version++;
    const lines = sdpSessionLines(this.sessionId, this.version, this.settings.advertisedAddress);
    if (this.offered && this.negotiated) {
      for (const [index, line] of this.offered.media.entries()) {
        if (index !== this.negotiated.audioIndex) {
          lines.push(`m=${line.media} 0 ${line.proto} ${line.formats[0] ?? "0"}`);
          continue;
        }
        lines.push(...answeredAudioLines(socket.port, this.negotiated, this.negotiated.direction));
      }
      this.offered = undefined;
    } else {
      this.ourOffer = true;
      const codecs = this.offerCodec
        ? [this.offerCodec]
        : [
            { payloadType: 0, name: "PCMU" },
            { payloadType: 8, name: "PCMA" },
          ];
      lines.push(
        `m=audio ${socket.port} RTP/AVP ${codecs.map((codec) => codec.payloadType).join(" ")} ${TELEPHONE_EVENT_PT}`,
        ...codecs.map((codec) => `a=rtpmap:${codec.payloadType} ${codec.name}/8000`),
        `a=rtpmap:${TELEPHONE_EVENT_PT} telephone-event/8000`,
        `a=fmtp:${TELEPHONE_EVENT_PT} 0-15`,
        "a=ptime:20",
        "a=sendrecv",
      );
    }
    return { body: `${lines.join("\r\n")}\r\n`, contentType: "application/sdp" };
  }

  async rollbackDescription(): Promise<void> {
    this.offered = undefined;
    this.ourOffer = false;
  }

  sendDtmf(): boolean {
    return false;
  }

  close(): void {
    this.closed = true;
    this.socket?.close();
    this.opening?.then((socket) => socket.close()).catch(() => {});
  }

  /** Opens the RTP socket ahead of the answer (a bridged call relays early media through it). */
  open(): Promise<udp.Socket<"buffer">> {
    this.opening ??= this.bind().then((socket) => {
      this.socket = socket;
      if (this.closed) socket.close();
      return socket;
    });
    return this.opening;
  }

  private bind(): Promise<udp.Socket<"buffer">> {
    return bindRtpSocket(this.settings, (packet, port, address) => {
      this.caller.heard(port, address);
      if (this.forward) this.forward(packet);
      else this.onPacket(packet);
    });
  }

  /** RFC 3550 header, then an RFC 4733 event when the payload type is the negotiated telephone-event. */
  private onPacket(packet: Buffer): void {
    if (packet.length < 12 || packet[0]! >> 6 !== 2) return;
    const payloadType = packet[1]! & 0x7f;
    if (this.negotiated?.telephoneEvent === undefined || payloadType !== this.negotiated.telephoneEvent) return;
    let offset = 12 + (packet[0]! & 0x0f) * 4;
    if (packet[0]! & 0x10) {
      if (packet.length < offset + 4) return;
      offset += 4 + packet.readUInt16BE(offset + 2) * 4;
    }
    if (packet.length < offset + 4) return;
    const event = packet[offset]!;
    const ended = (packet[offset + 1]! & 0x80) !== 0;
    // One key press is many packets with one timestamp (updates, then three end packets); a
    // new press has a new timestamp, or restarts after an end with the same one (a replay).
    const press = `${packet.readUInt32BE(8)}:${packet.readUInt32BE(4)}`;
    const isNew = press !== this.lastPress || (this.lastEnded && !ended);
    this.lastPress = press;
    this.lastEnded = ended;
    if (!isNew || event >= DTMF_EVENTS.length) return;
    const digit = DTMF_EVENTS[event]!;
    log.debug({ digit }, "sip: rfc 4733 digit");
    if (this.digitListener) this.digitListener(digit);
    else this.pendingDigits.push(digit);
  }
}

/** Handlers made before their session asks for one (a bridged call's two legs): the factory hands them over. */
export const legMedia = new WeakMap<Session, SessionDescriptionHandler>();

export function mediaFactory(settings: SipConfig & { advertisedAddress: string }): SessionDescriptionHandlerFactory {
  return (session) => legMedia.get(session) ?? new GatewayMedia(settings);
}
