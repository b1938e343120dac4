/**
 * One incoming call: it resolves its room, answers (after the media endpoint did, when
 * calls are bridged), joins the conference through the adapter or the bridge, collects a
 * keyed-in conference id when the INVITE named no room, and records what happened.
 * Over 350 lines: PhoneCall is one state machine (answer, bridge or join, end) whose steps
 * all read and set its state; the DTMF prompt (dtmf.ts) and the bridged leg (bridge.ts) are
 * already outside it, and cutting it further would only pass that state around.
 */
import { type Bye, type Invitation, SessionState, UserAgent } from "sip.js";
import type { SipConfig } from "../src/core/config";
import { log } from "../src/core/log";
import type { ConferenceAdapter, ConferenceJoin } from "./adapter";
import { type EndpointLeg, type LegResult, type MediaEndpoints, placeLeg } from "./bridge";
import { CallLog } from "./call-log";
import { answerInfo, ConferenceIdPrompt } from "./dtmf";
import { GatewayMedia, legMedia, negotiate, UnacceptableOffer } from "./media";
import { ORIGINAL_URI_HEADER, parseVia } from "./message";
import { byMapperId, type ConferenceDirectory, JIGASI_ROOM_HEADER, type ResolvedRoom, resolveRoom } from "./rooms";

/** What a call needs of its gateway. */
export interface CallHost {
  readonly settings: SipConfig;
  readonly directory: ConferenceDirectory;
  readonly adapter: ConferenceAdapter;
  /** The address the gateway advertises in SDP. */
  readonly address: string;
  /** The user part of the trunk AOR: the gateway's own number, never a conference id. */
  readonly ownNumber: string | undefined;
  readonly mediaEndpoints: MediaEndpoints;
  /** The user agent whose transport reaches a URI, for the bridged leg. */
  agentFor(uri: string): UserAgent | undefined;
}

/** The Request-URI the caller sent (the transport readdressed the request to the gateway's contact). */
function dialled(request: Invitation["request"]) {
  const original = request.getHeader(ORIGINAL_URI_HEADER);
  return (original ? UserAgent.makeURI(original) : undefined) ?? request.ruri;
}

export class PhoneCall {
  readonly callId: string;
  readonly record: CallLog;
  /** The Request-URI as dialled, parsed once (sip.js's grammar is not cheap). */
  private readonly dialled: ReturnType<typeof dialled>;
  private room: ResolvedRoom | undefined;
  private join: ConferenceJoin | undefined;
  private reason: string | undefined;
  private finalStatus: number | undefined;
  private answered = false;
  private acked = false;
  private readonly timers: ReturnType<typeof setTimeout>[] = [];
  /** Set while the caller is keying in a conference id. */
  private prompt: ConferenceIdPrompt | undefined;
  /** The bridged leg to the media endpoint, once it answered. */
  private leg: EndpointLeg | undefined;
  private ringing = false;
  /** Aborted when the caller cancels or the call ends, so a leg still being placed is given up. */
  private readonly abandoned = new AbortController();
  readonly finished: Promise<void>;

  constructor(
    private readonly gateway: CallHost,
    private readonly invitation: Invitation,
    transport: string,
  ) {
    const request = invitation.request;
    this.callId = request.callId;
    this.dialled = dialled(request);
    const via = parseVia(request.getHeader("via")?.split(",")[0]?.trim() ?? "");
    const source = via
      ? `${via.params.get("received") ?? via.host}:${via.params.get("rport") ?? via.port ?? 5060}`
      : "unknown";
    this.record = new CallLog({
      callId: request.callId,
      caller: request.from.uri.aor,
      callee: this.dialled?.aor ?? "",
      transport,
      source,
    });
    this.finished = new Promise((resolve) => {
      invitation.stateChange.addListener((state) => {
        if (state === SessionState.Terminated) this.finish().then(resolve, resolve);
      });
    });
    // At timer L sip.js ends a call whose ACK never came, even one the caller has meanwhile
    // ended with a BYE (an ACK lost under load), and then throws from inside its timer.
    const withAckTimeout = invitation as unknown as { onAckTimeout(): void };
    const endUnacknowledged = withAckTimeout.onAckTimeout.bind(invitation);
    withAckTimeout.onAckTimeout = () => {
      if (invitation.state === SessionState.Established) endUnacknowledged();
    };
    invitation.delegate = {
      onAck: () => {
        this.acked = true;
      },
      onBye: (bye: Bye) => {
        this.reason ??= "caller_bye";
        bye.accept();
      },
      onCancel: () => {
        this.reason ??= "cancelled";
        this.finalStatus ??= 487;
        this.abandoned.abort();
      },
      onInfo: (info) => {
        const digit = answerInfo(info);
        if (digit !== undefined) this.prompt?.push(digit);
      },
    };
  }

  private get settings(): SipConfig {
    return this.gateway.settings;
  }

  private get media(): GatewayMedia | undefined {
    const handler = this.invitation.sessionDescriptionHandler;
    return handler instanceof GatewayMedia ? handler : undefined;
  }

  async run(): Promise<void> {
    const offer = this.invitation.body;
    if (offer !== undefined && offer !== "") {
      const contentType = this.invitation.request.getHeader("content-type") ?? "";
      if (!/^application\/sdp\s*(;|$)/i.test(contentType))
        return this.reject(415, "unsupported_media_type", ["Accept: application/sdp"]);
      try {
        negotiate(offer);
      } catch (error) {
        if (error instanceof UnacceptableOffer) return this.reject(488, "unacceptable_media");
        throw error;
      }
    }
    const request = this.invitation.request;
    const resolution = await resolveRoom(
      {
        roomHeader: request.getHeader(this.settings.roomHeader) ?? request.getHeader(JIGASI_ROOM_HEADER),
        requestUser: this.dialled?.user,
      },
      {
        accountId: this.settings.accountId,
        defaultRoom: this.settings.defaultRoom,
        ownNumber: this.gateway.ownNumber,
      },
      this.gateway.directory,
    );
    if (this.invitation.state !== SessionState.Initial) return;
    switch (resolution.kind) {
      case "unknown_id":
        return this.reject(404, "not_found");
      case "invalid_header":
        return this.reject(400, "invalid_room_header");
      case "no_account":
        log.warn({ room: resolution.room }, "sip: a named room needs SIP_ACCOUNT_ID");
        return this.reject(503, "no_account");
      case "room":
        this.room = resolution.resolved;
        this.record.resolved(resolution.resolved);
        if (this.gateway.mediaEndpoints.enabled) return this.bridgeThenAnswer();
        if (!(await this.ring()) || !(await this.answer())) return;
        return this.joinConference();
      case "collect_dtmf":
        if (!(await this.ring()) || !(await this.answer())) return;
        return this.collectDigits();
    }
  }

  private reject(status: number, reason: string, extraHeaders: string[] = []): void {
    if (this.invitation.state !== SessionState.Initial) return;
    this.reason = reason;
    this.finalStatus = status;
    this.invitation.reject({ statusCode: status, extraHeaders });
  }

  /** 180 and a pause before answering, when configured; false when the caller gave up meanwhile. */
  private async ring(): Promise<boolean> {
    if (this.settings.ringMs === 0) return true;
    await this.invitation.progress();
    await Bun.sleep(this.settings.ringMs);
    return this.invitation.state === SessionState.Initial;
  }

  private async answer(): Promise<boolean> {
    try {
      await this.invitation.accept();
    } catch (error) {
      log.warn({ callId: this.callId, err: (error as Error).message }, "sip: could not answer");
      return false;
    }
    if (this.invitation.state !== SessionState.Established) return false;
    this.answered = true;
    this.record.answered();
    this.timers.push(setTimeout(() => this.hangUp("max_duration"), this.settings.maxCallSeconds * 1000));
    return true;
  }

  /** The caller's media handler, made ahead of the answer so the bridge can relay early media through it. */
  private callerMedia(): GatewayMedia {
    const existing = this.media ?? legMedia.get(this.invitation);
    if (existing instanceof GatewayMedia) return existing;
    const media = new GatewayMedia({ ...this.settings, advertisedAddress: this.gateway.address });
    legMedia.set(this.invitation, media);
    return media;
  }

  private placeLeg(passthroughOffer: string | undefined, callerMedia: GatewayMedia): Promise<LegResult> {
    const passingSdp = passthroughOffer !== undefined;
    const room = this.room!;
    const domain = this.settings.media.conferenceDomain;
    const from = this.invitation.request.from;
    return placeLeg({
      agentFor: (uri) => this.gateway.agentFor(uri),
      settings: { ...this.settings, advertisedAddress: this.gateway.address },
      endpoints: this.gateway.mediaEndpoints.order(),
      conference: room.conference ?? (domain ? `${room.room}@${domain}` : room.room),
      caller: { displayName: from.displayName || from.uri.user || "phone" },
      callId: this.callId,
      callerMedia,
      passthroughOffer,
      onProgress: (statusCode, sdp) => this.endpointProgress(statusCode, sdp, callerMedia, passingSdp),
      signal: this.abandoned.signal,
    });
  }

  /** Ringing and early media from the endpoint reach the caller while it has no answer yet. */
  private endpointProgress(
    statusCode: number,
    sdp: string | undefined,
    callerMedia: GatewayMedia,
    passingSdp: boolean,
  ): void {
    if (this.invitation.state !== SessionState.Initial) return;
    // Early media needs the endpoint's SDP, and (relayed) the caller's offer to answer in the 183.
    const early = statusCode === 183 && sdp !== undefined && (passingSdp || callerMedia.negotiated !== undefined);
    if (early) {
      if (passingSdp) callerMedia.passthroughAnswer = sdp;
      this.ringing = true;
      this.invitation
        .progress({ statusCode: 183 })
        .catch((error: Error) => log.debug({ callId: this.callId, err: error.message }, "sip: early media not sent"));
    } else if (!this.ringing) {
      this.ringing = true;
      this.invitation
        .progress()
        .catch((error: Error) => log.debug({ callId: this.callId, err: error.message }, "sip: ringing not sent"));
    }
  }

  /**
   * A room known from the INVITE: the endpoint leg is placed first, so its ringing, early
   * media and failure reach the caller, who is answered only once the endpoint answered.
   */
  private async bridgeThenAnswer(): Promise<void> {
    const offer = this.invitation.body || undefined;
    const passthrough = !this.settings.media.relay && offer !== undefined ? offer : undefined;
    const callerMedia = this.callerMedia();
    if (passthrough === undefined) {
      if (offer !== undefined) await callerMedia.setDescription(offer);
      await callerMedia.open();
    }
    const result = await this.placeLeg(passthrough, callerMedia);
    if (result.kind === "failed") return this.legFailed(result);
    const leg = result.leg;
    this.attach(leg);
    if (this.invitation.state !== SessionState.Initial) return leg.hangUp();
    if (passthrough !== undefined) callerMedia.passthroughAnswer = leg.passthroughAnswer;
    if (!(await this.answer())) return leg.hangUp();
  }

  /** A room keyed in by DTMF: the caller is answered already, and its audio is relayed. */
  private async bridgeAnswered(): Promise<void> {
    const callerMedia = this.media;
    if (!callerMedia) return this.hangUp("gateway_error");
    const result = await this.placeLeg(undefined, callerMedia);
    if (result.kind === "failed") return this.legFailed(result);
    this.attach(result.leg);
    if (this.invitation.state !== SessionState.Established) result.leg.hangUp();
  }

  private legFailed(result: Extract<LegResult, { kind: "failed" }>): void {
    log.warn(
      { callId: this.callId, endpoint: result.endpoint, status: result.status, reason: result.reason },
      "sip: no media endpoint took the call",
    );
    this.record.mediaLeg({ endpoint: result.endpoint, status: result.endpointStatus ?? result.status });
    if (this.invitation.state === SessionState.Initial) this.reject(result.status, result.reason);
    else this.hangUp(result.reason);
  }

  private attach(leg: EndpointLeg): void {
    this.leg = leg;
    this.record.mediaLeg({ endpoint: leg.endpoint, callId: leg.callId, status: 200 });
    leg.inviter.delegate = {
      onBye: (bye: Bye) => {
        this.reason ??= "endpoint_bye";
        bye.accept();
      },
    };
    // However the endpoint's leg ends, the caller's ends with it.
    leg.onEnded = () => this.hangUp("endpoint_ended");
  }

  private async joinConference(): Promise<void> {
    const room = this.room!;
    const negotiated = this.media?.negotiated;
    const join: ConferenceJoin = {
      callId: this.callId,
      accountId: room.accountId,
      room: room.room,
      conference: room.conference,
      caller: this.invitation.request.from.uri.aor,
      callee: this.dialled?.aor ?? "",
      media: {
        codec: negotiated?.codec.name,
        payloadType: negotiated?.codec.payloadType,
        remoteAddress: negotiated?.remote.address,
        remotePort: negotiated?.remote.port,
        gatewayPort: this.media?.rtpPort,
      },
    };
    try {
      await this.gateway.adapter.join(join);
    } catch (error) {
      log.warn({ callId: this.callId, err: (error as Error).message }, "sip: conference join failed");
      this.hangUp("join_failed");
      return;
    }
    if (this.invitation.state !== SessionState.Established) {
      await this.gateway.adapter.leave(join, this.reason ?? "ended");
      return;
    }
    this.join = join;
    this.record.joined();
  }

  private collectDigits(): void {
    this.prompt = new ConferenceIdPrompt(
      {
        callId: this.callId,
        lookUp: (id) => byMapperId(this.gateway.directory, Number(id), "dtmf"),
        established: () => this.invitation.state === SessionState.Established,
        found: (room) => this.keyedIn(room),
        hangUp: (reason) => this.hangUp(reason),
      },
      this.settings,
    );
    const media = this.media;
    if (media) media.onDigit = (digit) => this.prompt?.push(digit);
  }

  private async keyedIn(room: ResolvedRoom): Promise<void> {
    this.prompt = undefined;
    this.room = room;
    this.record.resolved(room);
    if (this.gateway.mediaEndpoints.enabled) return this.bridgeAnswered();
    await this.joinConference();
  }

  hangUp(reason: string, statusBeforeAnswer = 480): void {
    const state = this.invitation.state;
    if (state === SessionState.Initial || state === SessionState.Establishing) {
      this.reason ??= reason;
      this.finalStatus ??= statusBeforeAnswer;
      try {
        this.invitation.reject({ statusCode: statusBeforeAnswer });
      } catch (error) {
        log.debug({ callId: this.callId, err: (error as Error).message }, "sip: reject after the fact");
      }
      return;
    }
    if (state !== SessionState.Established) return;
    this.reason ??= reason;
    this.invitation
      .bye()
      .catch((error: Error) => log.warn({ callId: this.callId, err: error.message }, "sip: bye failed"));
  }

  private async finish(): Promise<void> {
    for (const timer of this.timers) clearTimeout(timer);
    this.prompt?.stop();
    this.prompt = undefined;
    this.abandoned.abort();
    let reason = this.reason;
    if (!reason) reason = this.answered ? (this.acked ? "ended" : "no_ack") : "cancelled";
    const status = this.answered ? undefined : (this.finalStatus ?? 487);
    const leg = this.leg;
    if (leg) leg.hangUp();
    // A caller refused before its answer has a media handler sip.js never took over.
    legMedia.get(this.invitation)?.close();
    if (this.join) {
      // Whatever the adapter does on leave, the call record still gets its end.
      await this.gateway.adapter
        .leave(this.join, reason)
        .catch((error: Error) => log.warn({ callId: this.callId, err: error.message }, "sip: leave failed"));
    }
    await this.record.ended(reason, status, leg?.media?.counts);
  }
}
