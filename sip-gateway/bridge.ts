/**
 * The gateway as a back-to-back user agent: once a call's room is known it places a second
 * call leg to the conference's SIP media endpoint (Jigasi, or any SIP URI), with the room in
 * the header that endpoint reads, and bridges the two legs. By default the audio is relayed
 * through the gateway (a socket on each side, packets forwarded unchanged, so SSRC, sequence
 * numbers and RFC 4733 events pass through); with SIP_MEDIA_RELAY=false the caller's SDP goes
 * to the endpoint and the endpoint's answer back, so audio flows between them directly.
 */
import type { udp } from "bun";
import {
  type BodyAndContentType,
  type Core,
  Inviter,
  type SessionDescriptionHandler,
  SessionState,
  UserAgent,
} from "sip.js";
import type { SipConfig } from "../src/core/config";
import { log } from "../src/core/log";
import {
  answeredAudioLines,
  bindRtpSocket,
  type GatewayMedia,
  legMedia,
  type Negotiated,
  negotiate,
  RtpPeer,
  sdpSessionLines,
} from "./media";

/** The endpoint side of a relayed call: offers the caller's codec and relays what the endpoint sends. */
export class EndpointMedia implements SessionDescriptionHandler {
  private socket: udp.Socket<"buffer"> | undefined;
  private readonly sessionId = Math.floor(Math.random() * 1e9);
  private version = 0;
  private remoteOffer: Negotiated | undefined;
  private answered = false;
  private closed = false;
  readonly endpoint = new RtpPeer();
  /** Packets relayed from the caller to the endpoint, and from the endpoint to the caller. */
  readonly counts = { fromCaller: 0, toCaller: 0 };

  constructor(
    private readonly settings: SipConfig & { advertisedAddress: string },
    private readonly caller: GatewayMedia,
    private readonly codec: { payloadType: number; name: string },
    private readonly telephoneEvent: number | undefined,
  ) {}

  /** Opens the endpoint-side socket and starts relaying both ways. */
  async open(): Promise<void> {
    this.socket = await bindRtpSocket(this.settings, (packet, port, address) => {
      this.endpoint.heard(port, address);
      if (this.caller.sendToCaller(packet)) this.counts.toCaller++;
    });
    if (this.closed) this.socket.close();
    this.caller.forward = (packet) => {
      const target = this.endpoint.target;
      if (target && this.socket?.send(packet, target.port, target.address!)) this.counts.fromCaller++;
    };
  }

  hasDescription(contentType: string): boolean {
    return contentType.split(";")[0]!.trim().toLowerCase() === "application/sdp";
  }

  /** Early media (183) and the final answer both name where the endpoint takes its audio. */
  acceptAnswer(sdp: string): void {
    this.endpoint.describe(negotiate(sdp, this.codec).remote);
  }

  async setDescription(sdp: string): Promise<void> {
    if (!this.answered) {
      this.acceptAnswer(sdp);
      this.answered = true;
      return;
    }
    // A re-INVITE from the endpoint: it may move its media; the codec stays the caller's (else 488).
    this.remoteOffer = negotiate(sdp, this.codec);
    this.endpoint.describe(this.remoteOffer.remote);
  }

  async getDescription(): Promise<BodyAndContentType> {
    this.version++;
    // Without an offer of the endpoint's to answer, both ways.
    const direction = this.remoteOffer?.direction ?? "sendrecv";
    this.remoteOffer = undefined;
    const lines = [
      ...sdpSessionLines(this.sessionId, this.version, this.settings.advertisedAddress),
      ...answeredAudioLines(
        this.socket?.port ?? 0,
        { codec: this.codec, telephoneEvent: this.telephoneEvent },
        direction,
      ),
    ];
    return { body: `${lines.join("\r\n")}\r\n`, contentType: "application/sdp" };
  }

  sendDtmf(): boolean {
    return false;
  }

  close(): void {
    this.closed = true;
    this.caller.forward = undefined;
    this.socket?.close();
  }
}

/** With SIP_MEDIA_RELAY=false: the caller's offer goes out as it is, and the endpoint's answer comes back. */
class PassthroughMedia implements SessionDescriptionHandler {
  answer: string | undefined;
  constructor(private readonly offer: string) {}
  hasDescription(contentType: string): boolean {
    return contentType.split(";")[0]!.trim().toLowerCase() === "application/sdp";
  }
  async getDescription(): Promise<BodyAndContentType> {
    return { body: this.offer, contentType: "application/sdp" };
  }
  async setDescription(sdp: string): Promise<void> {
    this.answer = sdp;
  }
  sendDtmf(): boolean {
    return false;
  }
  close(): void {}
}

/** The order in which a call tries the media endpoints: configured order, or rotated per call. */
export class MediaEndpoints {
  private next = 0;
  constructor(private readonly settings: SipConfig["media"]) {}

  get enabled(): boolean {
    return this.settings.uris.length > 0;
  }

  order(): string[] {
    const { uris, selection } = this.settings;
    if (selection === "failover") return uris;
    const start = this.next++ % uris.length;
    return [...uris.slice(start), ...uris.slice(0, start)];
  }
}

export type LegResult =
  | { kind: "answered"; leg: EndpointLeg }
  | { kind: "failed"; status: number; reason: string; endpoint: string | undefined; endpointStatus?: number };

export interface LegRequest {
  agentFor(uri: string): UserAgent | undefined;
  settings: SipConfig & { advertisedAddress: string };
  endpoints: string[];
  /** The value of the room header, e.g. `standup@conference.example.com`. */
  conference: string;
  caller: { displayName: string };
  callId: string;
  /** The caller's side: its media handler, and its SDP offer when passing SDP through. */
  callerMedia: GatewayMedia;
  passthroughOffer: string | undefined;
  /** 180, or 183 with the endpoint's early media (its SDP, already applied to the relay). */
  onProgress(statusCode: number, sdp: string | undefined): void;
  /** Aborted when the caller gives up (CANCEL, or the call ended): the attempt is cancelled at once. */
  signal: AbortSignal;
}

/** One answered call leg to a media endpoint. */
export class EndpointLeg {
  onEnded: (() => void) | undefined;
  constructor(
    readonly endpoint: string,
    readonly inviter: Inviter,
    readonly media: EndpointMedia | undefined,
    private readonly passthrough: PassthroughMedia | undefined,
  ) {
    inviter.stateChange.addListener((state) => {
      if (state === SessionState.Terminated) this.onEnded?.();
    });
  }

  /** With SDP passed through: the endpoint's answer, for the caller. */
  get passthroughAnswer(): string | undefined {
    return this.passthrough?.answer;
  }

  get callId(): string {
    return this.inviter.request.callId;
  }

  hangUp(): void {
    if (this.inviter.state === SessionState.Established) {
      this.inviter
        .bye()
        .catch((error: Error) => log.warn({ callId: this.callId, err: error.message }, "sip: media leg bye failed"));
    } else if (this.inviter.state === SessionState.Initial || this.inviter.state === SessionState.Establishing) {
      this.inviter.cancel().catch(() => {});
    }
    this.media?.close();
  }
}

/**
 * Tries the endpoints in order until one answers. An endpoint that sends nothing within the
 * response timeout, or no final answer within the answer timeout, or answers 5xx (or 408),
 * is skipped for the next; any other refusal (busy, declined, not found) is the call's answer.
 */
export async function placeLeg(request: LegRequest): Promise<LegResult> {
  let last: LegResult = { kind: "failed", status: 503, reason: "media_endpoint_down", endpoint: undefined };
  for (const endpoint of request.endpoints) {
    if (request.signal.aborted) return { kind: "failed", status: 487, reason: "cancelled", endpoint };
    const result = await attempt(request, endpoint);
    if (result.kind === "answered") return result;
    last = result;
    const retryable =
      result.endpointStatus === undefined ||
      result.endpointStatus === 408 ||
      (result.endpointStatus >= 500 && result.endpointStatus < 600);
    if (!retryable) break;
    log.warn(
      { callId: request.callId, endpoint, status: result.endpointStatus, reason: result.reason },
      "sip: media endpoint failed, trying the next",
    );
  }
  return last;
}

async function attempt(request: LegRequest, endpoint: string): Promise<LegResult> {
  const { settings } = request;
  const agent = request.agentFor(endpoint);
  if (!agent) return { kind: "failed", status: 503, reason: "media_endpoint_unreachable", endpoint };
  const target = UserAgent.makeURI(endpoint);
  if (!target) return { kind: "failed", status: 503, reason: "media_endpoint_invalid", endpoint };
  const callerMedia = request.callerMedia;
  let media: EndpointMedia | undefined;
  let passthrough: PassthroughMedia | undefined;
  if (request.passthroughOffer !== undefined) passthrough = new PassthroughMedia(request.passthroughOffer);
  else {
    const codec = callerMedia.negotiated?.codec ?? { payloadType: 0, name: "PCMU" };
    // An INVITE without SDP gets the gateway's offer in the 200: it offers the codec the endpoint got.
    if (!callerMedia.negotiated) callerMedia.offerCodec = codec;
    // Telephone-events go to the endpoint only when the caller's leg carries them (or will: a late offer's).
    const telephoneEvent = callerMedia.negotiated ? callerMedia.negotiated.telephoneEvent : 101;
    media = new EndpointMedia(settings, callerMedia, codec, telephoneEvent);
    await media.open();
  }
  const inviter = new Inviter(agent, target, {
    extraHeaders: [`${settings.media.roomHeader}: ${request.conference}`],
    params: { fromDisplayName: request.caller.displayName },
  });
  legMedia.set(inviter, media ?? passthrough!);
  const leg = new EndpointLeg(endpoint, inviter, media, passthrough);
  return new Promise<LegResult>((resolve) => {
    let settled = false;
    let heard = false;
    const timers: ReturnType<typeof setTimeout>[] = [];
    const settle = (result: LegResult) => {
      if (settled) return;
      settled = true;
      for (const timer of timers) clearTimeout(timer);
      request.signal.removeEventListener("abort", abandoned);
      if (result.kind === "failed") leg.hangUp();
      resolve(result);
    };
    const fail = (status: number, reason: string, endpointStatus?: number) =>
      settle({ kind: "failed", status, reason, endpoint, endpointStatus });
    timers.push(
      setTimeout(() => {
        if (!heard) fail(503, "media_endpoint_silent");
      }, settings.media.responseTimeoutMs),
      setTimeout(() => fail(408, "media_endpoint_no_answer", 408), settings.media.answerTimeoutMs),
    );
    // The caller's CANCEL reaches the endpoint leg at once, not at the next timeout.
    const abandoned = () => fail(487, "cancelled", 487);
    request.signal.addEventListener("abort", abandoned, { once: true });
    inviter.stateChange.addListener((state) => {
      // sip.js ends the session before it tells the request delegate why: let onReject speak first.
      if (state === SessionState.Terminated) setTimeout(() => fail(503, "media_endpoint_ended"), 0);
      if (state === SessionState.Established) settle({ kind: "answered", leg });
    });
    inviter
      .invite({
        requestDelegate: {
          onTrying: () => {
            heard = true;
          },
          onProgress: (response: Core.IncomingResponse) => {
            heard = true;
            const message = response.message;
            const body =
              message.body && /^application\/sdp/i.test(message.getHeader("content-type") ?? "")
                ? message.body
                : undefined;
            try {
              if (body && media) media.acceptAnswer(body);
            } catch (error) {
              log.warn(
                { callId: request.callId, err: (error as Error).message },
                "sip: unusable early media from the media endpoint",
              );
              return;
            }
            request.onProgress(message.statusCode ?? 180, body);
          },
          onAccept: () => {
            heard = true;
          },
          onReject: (response: Core.IncomingResponse) => {
            heard = true;
            const status = response.message.statusCode;
            // Busy and declined mean the same to the caller; other failures of the endpoint are the gateway's.
            const forCaller =
              status === 486 || status === 600 || status === 603 || status === 404 || status === 480 ? status : 503;
            fail(forCaller, `media_endpoint_${status}`, status ?? 500);
          },
        },
      })
      .catch((error: Error) => fail(503, `media_endpoint_error: ${error.message}`));
  });
}
