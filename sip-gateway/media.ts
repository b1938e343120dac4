/**
 * The server-side session description handler sip.js asks for on every call: it answers
 * an SDP offer with G.711 (PCMU or PCMA, the caller's preference) plus telephone-event,
 * or makes that offer itself when the INVITE came without one, and opens the call's RTP
 * socket. The gateway carries no audio onward; the socket is read for RFC 4733
 * telephone-events (DTMF), and everything else arriving on it is dropped.
 */
import type { udp } from "bun";
import type { BodyAndContentType, SessionDescriptionHandler, SessionDescriptionHandlerFactory } from "sip.js";
import type { SipConfig } from "../src/config";
import { log } from "../src/http/log";

export const G711 = { 0: "PCMU", 8: "PCMA" } as const;
const TELEPHONE_EVENT_PT = 101;
const DTMF_EVENTS = "0123456789*#ABCD";

export class UnacceptableOffer extends Error {}

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
  for (const direction of ["sendonly", "recvonly", "inactive"] as const) if (line.attributes.includes(direction)) return direction;
  return "sendrecv";
}

/** Picks what to answer; throws UnacceptableOffer when no audio line offers G.711 over plain RTP. */
export function negotiate(sdp: string): Negotiated {
  const parsed = parseSdp(sdp);
  for (const [index, line] of parsed.media.entries()) {
    if (line.media !== "audio" || !(line.port > 0) || line.proto !== "RTP/AVP") continue;
    for (const format of line.formats) {
      const map = rtpmap(line, format)?.toUpperCase();
      const payloadType = Number(format);
      const name = map ? map.split("/")[0] : G711[payloadType as keyof typeof G711];
      if (name !== "PCMU" && name !== "PCMA") continue;
      if (map && !map.startsWith(`${name}/8000`)) continue;
      const event = line.formats.find((candidate) => rtpmap(line, candidate)?.toLowerCase().startsWith("telephone-event/8000"));
      return {
        audioIndex: index,
        codec: { payloadType, name },
        telephoneEvent: event === undefined ? undefined : Number(event),
        remote: { address: line.connection ?? parsed.connection, port: line.port },
        direction: directionOf(line),
      };
    }
  }
  throw new UnacceptableOffer("no G.711 audio over RTP/AVP in the offer");
}

const ANSWER_DIRECTION = { sendrecv: "sendrecv", sendonly: "recvonly", recvonly: "sendonly", inactive: "inactive" } as const;

export class GatewayMedia implements SessionDescriptionHandler {
  private socket: udp.Socket<"buffer"> | undefined;
  private opening: Promise<udp.Socket<"buffer">> | undefined;
  private readonly sessionId = Math.floor(Math.random() * 1e9);
  private version = 0;
  private offered: ParsedSdp | undefined;
  private ourOffer = false;
  negotiated: Negotiated | undefined;
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
      this.ourOffer = false;
      return;
    }
    this.negotiated = negotiate(sdp);
    this.offered = parseSdp(sdp);
  }

  async getDescription(): Promise<BodyAndContentType> {
    const socket = await this.open();
    const address = this.settings.advertisedAddress;
    const family = address.includes(":") ? "IP6" : "IP4";
    this.version++;
    const lines = [
      "v=0",
      `o=parley ${this.sessionId} ${this.version} IN ${family} ${address}`,
      "s=parley",
      `c=IN ${family} ${address}`,
      "t=0 0",
    ];
    if (this.offered && this.negotiated) {
      for (const [index, line] of this.offered.media.entries()) {
        if (index !== this.negotiated.audioIndex) {
          lines.push(`m=${line.media} 0 ${line.proto} ${line.formats[0] ?? "0"}`);
          continue;
        }
        const { codec, telephoneEvent } = this.negotiated;
        lines.push(`m=audio ${socket.port} RTP/AVP ${codec.payloadType}${telephoneEvent === undefined ? "" : ` ${telephoneEvent}`}`);
        lines.push(`a=rtpmap:${codec.payloadType} ${codec.name}/8000`);
        if (telephoneEvent !== undefined) lines.push(`a=rtpmap:${telephoneEvent} telephone-event/8000`, `a=fmtp:${telephoneEvent} 0-15`);
        lines.push("a=ptime:20", `a=${ANSWER_DIRECTION[this.negotiated.direction]}`);
      }
      this.offered = undefined;
    } else {
      this.ourOffer = true;
      lines.push(
        `m=audio ${socket.port} RTP/AVP 0 8 ${TELEPHONE_EVENT_PT}`,
        "a=rtpmap:0 PCMU/8000",
        "a=rtpmap:8 PCMA/8000",
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

  private open(): Promise<udp.Socket<"buffer">> {
    this.opening ??= this.bind().then((socket) => {
      this.socket = socket;
      if (this.closed) socket.close();
      return socket;
    });
    return this.opening;
  }

  private async bind(): Promise<udp.Socket<"buffer">> {
    const { rtpPortMin, rtpPortMax } = this.settings;
    const handler = { data: (_socket: unknown, packet: Buffer) => this.onPacket(packet) };
    if (rtpPortMin === 0) return Bun.udpSocket({ hostname: this.settings.bindAddress, port: 0, socket: handler });
    // RTP takes even ports (RFC 3550); start at a random one so concurrent calls rarely collide.
    const span = Math.floor((rtpPortMax - rtpPortMin) / 2) + 1;
    const first = Math.floor(Math.random() * span);
    for (let i = 0; i < Math.min(span, 64); i++) {
      const port = rtpPortMin + ((first + i) % span) * 2;
      try {
        return await Bun.udpSocket({ hostname: this.settings.bindAddress, port, socket: handler });
      } catch {}
    }
    throw new Error("no free RTP port in SIP_RTP_PORT_MIN..SIP_RTP_PORT_MAX");
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

export function mediaFactory(settings: SipConfig & { advertisedAddress: string }): SessionDescriptionHandlerFactory {
  return () => new GatewayMedia(settings);
}
