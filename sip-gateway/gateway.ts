/**
 * The SIP gateway: one sip.js user agent per transport (UDP, TCP), each on its own
 * endpoint so Via and Contact name the right transport and port. Every incoming INVITE
 * becomes a `PhoneCall` that resolves its room, answers, joins the conference through
 * the adapter, and records what happened.
 */
import {
  type Bye,
  Core,
  type Info,
  type Invitation,
  Registerer,
  RegistererState,
  SessionState,
  UserAgent,
  type UserAgentOptions,
} from "sip.js";
import type { SipConfig } from "../src/config";
import { isDependencyDown } from "../src/core/errors";
import { log } from "../src/core/log";
import type { ConferenceAdapter, ConferenceJoin } from "./adapter";
import { type EndpointLeg, type LegResult, MediaEndpoints, placeLeg } from "./bridge";
import { CallLog } from "./calls";
import { SourceGuard } from "./guard";
import { GatewayMedia, legMedia, mediaFactory, negotiate, UnacceptableOffer } from "./media";
import { ORIGINAL_URI_HEADER, parseVia } from "./message";
import { byMapperId, type ConferenceDirectory, JIGASI_ROOM_HEADER, type ResolvedRoom, resolveRoom } from "./rooms";
import { CONTACT_USER, EndpointTransport, type SipEndpoint, TcpEndpoint, UdpEndpoint } from "./transport";

export interface GatewayParts {
  settings: SipConfig;
  directory: ConferenceDirectory;
  adapter: ConferenceAdapter;
}

/** How long a stopping gateway waits for its BYEs to be answered and its records written. */
const STOP_GRACE_MS = 2_000;
/** A failed trunk registration is tried again after this long. */
const REGISTER_RETRY_MS = 30_000;

function advertisedAddress(settings: SipConfig): string {
  if (settings.publicAddress) return settings.publicAddress;
  return settings.bindAddress === "0.0.0.0" || settings.bindAddress === "::" ? "127.0.0.1" : settings.bindAddress;
}

export class SipGateway {
  readonly calls = new Map<string, PhoneCall>();
  private readonly agents: UserAgent[] = [];
  private readonly endpoints: SipEndpoint[] = [];
  private registerer: Registerer | undefined;
  private registerRetry: ReturnType<typeof setTimeout> | undefined;
  private stopping = false;
  readonly address: string;
  /** The user part of the trunk AOR: the gateway's own number, never a conference id. */
  readonly ownNumber: string | undefined;
  /** Set (SIP_MEDIA_URI): calls are bridged to a media endpoint instead of announced to the join URL. */
  readonly mediaEndpoints: MediaEndpoints;

  private constructor(readonly parts: GatewayParts) {
    this.address = advertisedAddress(parts.settings);
    const aor = parts.settings.trunk.aor;
    this.ownNumber = aor ? UserAgent.makeURI(aor)?.user : undefined;
    this.mediaEndpoints = new MediaEndpoints(parts.settings.media);
  }

  /** The user agent whose transport reaches a URI: TCP when it says so, else UDP when open. */
  agentFor(uri: string): UserAgent | undefined {
    const protocol = /;transport=tls/i.test(uri) || uri.startsWith("sips:") ? "TLS" : /;transport=tcp/i.test(uri) ? "TCP" : "UDP";
    return this.agents.find((agent) => agent.transport.protocol === protocol) ?? this.agents[0];
  }

  static async start(parts: GatewayParts): Promise<SipGateway> {
    const gateway = new SipGateway(parts);
    try {
      await gateway.open();
    } catch (error) {
      await gateway.stop();
      throw error;
    }
    return gateway;
  }

  get udpPort(): number | undefined {
    return this.endpoints.find((endpoint) => endpoint.protocol === "UDP")?.port;
  }

  get tcpPort(): number | undefined {
    return this.endpoints.find((endpoint) => endpoint.protocol === "TCP")?.port;
  }

  get tlsPort(): number | undefined {
    return this.endpoints.find((endpoint) => endpoint.protocol === "TLS")?.port;
  }

  get stats() {
    return Object.fromEntries(this.endpoints.map((endpoint) => [endpoint.protocol, { ...endpoint.stats }]));
  }

  private async open(): Promise<void> {
    const { settings } = this.parts;
    // sip.js keeps its transaction timers in one shared object, set for reliable transports
    // (timers I, J, K at zero). Over UDP a server transaction must outlive the peer's
    // retransmissions (RFC 3261 17.2), so they get UDP's values, which cost a reliable
    // transport only some memory. Timer L bounds the wait for the ACK of a 2xx; when it
    // fires, sip.js ends the call with a BYE (the RFC forbids one before that).
    const timers = Core.Timers as { -readonly [name in keyof typeof Core.Timers]: number };
    timers.TIMER_I = timers.T4;
    timers.TIMER_J = 64 * timers.T1;
    timers.TIMER_K = timers.T4;
    timers.TIMER_L = settings.ackTimeoutMs;
    const guard = new SourceGuard(settings.allowedSources, settings.requestsPerSecond);
    if (settings.udpPort !== 0) this.endpoints.push(await UdpEndpoint.open(settings, guard, settings.udpPort));
    if (settings.tcpPort !== 0) this.endpoints.push(TcpEndpoint.open(settings, guard, settings.tcpPort));
    if (settings.tls.port !== 0) this.endpoints.push(TcpEndpoint.open(settings, guard, settings.tls.port, settings.tls as { certPath: string; keyPath: string }));
    for (const endpoint of this.endpoints) this.agents.push(await this.startAgent(endpoint));
    if (settings.trunk.registrar) this.register();
  }

  private async startAgent(endpoint: SipEndpoint): Promise<UserAgent> {
    const { settings } = this.parts;
    const trunk = settings.trunk;
    const registers = trunk.registrar !== undefined && trunk.transport.toUpperCase() === endpoint.protocol;
    const options: UserAgentOptions = {
      uri: UserAgent.makeURI(registers && trunk.aor ? trunk.aor : `sip:parley@${this.address}`),
      transportConstructor: EndpointTransport,
      transportOptions: { endpoint },
      // The transport adds the port to the Via (see addViaPort); sip.js wants the bare host here.
      viaHost: this.address,
      // Ask for responses at the source port too (RFC 3581), which is the port Via names anyway.
      forceRport: true,
      contactName: CONTACT_USER,
      contactParams: { transport: endpoint.protocol.toLowerCase() },
      sessionDescriptionHandlerFactory: mediaFactory({ ...settings, advertisedAddress: this.address }),
      userAgentString: "Parley",
      // The gateway decides itself whether to ring (SIP_RING_MS) before its final answer.
      sendInitialProvisionalResponse: false,
      logBuiltinEnabled: false,
      logConfiguration: false,
      logLevel: "error",
      logConnector: (level, category, _label, content) => log[level === "log" ? "debug" : level]({ category }, `sip.js: ${content}`),
      delegate: { onInvite: (invitation) => this.onInvite(invitation, endpoint) },
      ...(registers ? { authorizationUsername: trunk.username, authorizationPassword: trunk.password } : {}),
    };
    const agent = new UserAgent(options);
    // sip.js builds the Contact from viaHost, with no port.
    agent.contact.uri.port = endpoint.port;
    await agent.start();
    return agent;
  }

  private register(): void {
    const { trunk } = this.parts.settings;
    const agent = this.agents.find((candidate) => candidate.transport.protocol === trunk.transport.toUpperCase());
    if (!agent) {
      log.warn({ transport: trunk.transport }, "sip: trunk registration needs that transport enabled");
      return;
    }
    this.registerer = new Registerer(agent, { registrar: UserAgent.makeURI(trunk.registrar!), expires: trunk.expiresSeconds });
    this.registerer.stateChange.addListener((state) => log.info({ state, registrar: trunk.registrar }, "sip: trunk registration"));
    const attempt = () => {
      if (this.stopping || !this.registerer) return;
      this.registerer
        .register({
          requestDelegate: {
            onReject: (response) => {
              log.warn({ status: response.message.statusCode }, "sip: trunk refused registration");
              this.registerRetry = setTimeout(attempt, REGISTER_RETRY_MS);
            },
          },
        })
        .catch((error: Error) => {
          log.warn({ err: error.message }, "sip: trunk registration failed");
          this.registerRetry = setTimeout(attempt, REGISTER_RETRY_MS);
        });
    };
    attempt();
  }

  get registrationState(): RegistererState | undefined {
    return this.registerer?.state;
  }

  private onInvite(invitation: Invitation, endpoint: SipEndpoint): void {
    const request = invitation.request;
    if (this.stopping || this.calls.size >= this.parts.settings.maxCalls) {
      invitation.reject({ statusCode: 503, extraHeaders: ["Retry-After: 5"] });
      return;
    }
    const call = new PhoneCall(this, invitation, endpoint.protocol);
    // A second INVITE with the same Call-ID and a new From tag is a new call: key by both.
    const key = `${request.callId}|${request.fromTag}`;
    this.calls.set(key, call);
    call.finished.then(() => this.calls.delete(key));
    call.run().catch((error: Error) => {
      // A caller refused for an outage may redial; 503 tells its proxy to try elsewhere or later.
      const outage = isDependencyDown(error);
      log.error({ callId: request.callId, err: error.message }, outage ? "sip: call failed, a dependency is down" : "sip: call failed");
      call.hangUp(outage ? "dependency_down" : "gateway_error", outage ? 503 : 500);
    });
  }

  async stop(): Promise<void> {
    this.stopping = true;
    clearTimeout(this.registerRetry);
    const calls = [...this.calls.values()];
    for (const call of calls) call.hangUp("shutdown", 503);
    const grace = new Promise<void>((resolve) => setTimeout(resolve, STOP_GRACE_MS));
    await Promise.race([Promise.all(calls.map((call) => call.finished)), grace]);
    if (this.registerer?.state === RegistererState.Registered) {
      await Promise.race([this.registerer.unregister().catch(() => {}), grace]);
    }
    // A user agent waits for its open client transactions (a REGISTER to a dead trunk: 32 s); do not.
    await Promise.race([Promise.all(this.agents.map((agent) => agent.stop().catch(() => {}))), grace]);
    for (const endpoint of this.endpoints) endpoint.close();
  }
}

/** The Request-URI the caller sent (the transport readdressed the request to the gateway's contact). */
function dialled(request: Invitation["request"]) {
  const original = request.getHeader(ORIGINAL_URI_HEADER);
  return (original ? UserAgent.makeURI(original) : undefined) ?? request.ruri;
}

/** Digits collected for one conference id, ended by #; * starts the entry over. */
class DigitEntry {
  private digits = "";
  constructor(private readonly onEntry: (id: string) => void) {}

  push(digit: string): void {
    if (digit === "#") {
      const entry = this.digits;
      this.digits = "";
      if (entry !== "") this.onEntry(entry);
    } else if (digit === "*") {
      this.digits = "";
    } else if (/^\d$/.test(digit) && this.digits.length < 15) {
      this.digits += digit;
    }
  }
}

/** `Signal=5` (application/dtmf-relay) or a bare `5` (application/dtmf). */
function infoDigit(contentType: string, body: string): string | undefined {
  const type = contentType.split(";")[0]!.trim().toLowerCase();
  if (type === "application/dtmf-relay") return /^\s*signal\s*=\s*([0-9*#A-Da-d])\s*$/im.exec(body)?.[1]?.toUpperCase();
  if (type === "application/dtmf") return /^\s*([0-9*#A-Da-d])\s*$/.exec(body)?.[1]?.toUpperCase();
  return undefined;
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
  private dtmfTimer: ReturnType<typeof setTimeout> | undefined;
  private wrongEntries = 0;
  private entry: DigitEntry | undefined;
  /** The bridged leg to the media endpoint, once it answered. */
  private leg: EndpointLeg | undefined;
  private ringing = false;
  /** Aborted when the caller cancels or the call ends, so a leg still being placed is given up. */
  private readonly abandoned = new AbortController();
  readonly finished: Promise<void>;

  constructor(
    private readonly gateway: SipGateway,
    private readonly invitation: Invitation,
    transport: string,
  ) {
    const request = invitation.request;
    this.callId = request.callId;
    this.dialled = dialled(request);
    const via = parseVia(request.getHeader("via")?.split(",")[0]?.trim() ?? "");
    const source = via ? `${via.params.get("received") ?? via.host}:${via.params.get("rport") ?? via.port ?? 5060}` : "unknown";
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
      onInfo: (info: Info) => this.onInfo(info),
    };
  }

  private get settings(): SipConfig {
    return this.gateway.parts.settings;
  }

  private get media(): GatewayMedia | undefined {
    const handler = this.invitation.sessionDescriptionHandler;
    return handler instanceof GatewayMedia ? handler : undefined;
  }

  async run(): Promise<void> {
    const offer = this.invitation.body;
    if (offer !== undefined && offer !== "") {
      const contentType = this.invitation.request.getHeader("content-type") ?? "";
      if (!/^application\/sdp\s*(;|$)/i.test(contentType)) return this.reject(415, "unsupported_media_type", ["Accept: application/sdp"]);
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
      this.gateway.parts.directory,
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
  private endpointProgress(statusCode: number, sdp: string | undefined, callerMedia: GatewayMedia, passingSdp: boolean): void {
    if (this.invitation.state !== SessionState.Initial) return;
    // Early media needs the endpoint's SDP, and (relayed) the caller's offer to answer in the 183.
    const early = statusCode === 183 && sdp !== undefined && (passingSdp || callerMedia.negotiated !== undefined);
    if (early) {
      if (passingSdp) callerMedia.passthroughAnswer = sdp;
      this.ringing = true;
      this.invitation.progress({ statusCode: 183 }).catch((error: Error) => log.debug({ callId: this.callId, err: error.message }, "sip: early media not sent"));
    } else if (!this.ringing) {
      this.ringing = true;
      this.invitation.progress().catch((error: Error) => log.debug({ callId: this.callId, err: error.message }, "sip: ringing not sent"));
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
    log.warn({ callId: this.callId, endpoint: result.endpoint, status: result.status, reason: result.reason }, "sip: no media endpoint took the call");
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
      await this.gateway.parts.adapter.join(join);
    } catch (error) {
      log.warn({ callId: this.callId, err: (error as Error).message }, "sip: conference join failed");
      this.hangUp("join_failed");
      return;
    }
    if (this.invitation.state !== SessionState.Established) {
      await this.gateway.parts.adapter.leave(join, this.reason ?? "ended");
      return;
    }
    this.join = join;
    this.record.joined();
  }

  private collectDigits(): void {
    this.entry = new DigitEntry((id) => {
      this.checkEntry(id).catch((error: Error) => {
        log.error({ callId: this.callId, err: error.message }, "sip: conference id look-up failed");
        this.hangUp(isDependencyDown(error) ? "dependency_down" : "gateway_error");
      });
    });
    this.restartDigitTimer();
    const media = this.media;
    if (media) media.onDigit = (digit) => this.entry?.push(digit);
  }

  private restartDigitTimer(): void {
    clearTimeout(this.dtmfTimer);
    this.dtmfTimer = setTimeout(() => this.hangUp("dtmf_timeout"), this.settings.dtmfTimeoutMs);
  }

  private async checkEntry(id: string): Promise<void> {
    if (!this.entry) return;
    const resolved = await byMapperId(this.gateway.parts.directory, Number(id), "dtmf");
    if (this.invitation.state !== SessionState.Established || !this.entry) return;
    if (!resolved) {
      this.wrongEntries++;
      log.info({ callId: this.callId, attempt: this.wrongEntries }, "sip: unknown conference id keyed in");
      if (this.wrongEntries >= this.settings.dtmfAttempts) this.hangUp("dtmf_failed");
      else this.restartDigitTimer();
      return;
    }
    this.entry = undefined;
    clearTimeout(this.dtmfTimer);
    this.room = resolved;
    this.record.resolved(resolved);
    if (this.gateway.mediaEndpoints.enabled) return this.bridgeAnswered();
    await this.joinConference();
  }

  private onInfo(info: Info): void {
    const request = info.request;
    const digit = infoDigit(request.getHeader("content-type") ?? "", request.body ?? "");
    if (digit === undefined) {
      info.reject({ statusCode: 415, extraHeaders: ["Accept: application/dtmf-relay, application/dtmf"] });
      return;
    }
    info.accept();
    this.entry?.push(digit);
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
    this.invitation.bye().catch((error: Error) => log.warn({ callId: this.callId, err: error.message }, "sip: bye failed"));
  }

  private async finish(): Promise<void> {
    for (const timer of this.timers) clearTimeout(timer);
    clearTimeout(this.dtmfTimer);
    this.abandoned.abort();
    this.entry = undefined;
    let reason = this.reason;
    if (!reason) reason = this.answered ? (this.acked ? "ended" : "no_ack") : "cancelled";
    const status = this.answered ? undefined : (this.finalStatus ?? 487);
    const leg = this.leg;
    if (leg) leg.hangUp();
    // A caller refused before its answer has a media handler sip.js never took over.
    legMedia.get(this.invitation)?.close();
    if (this.join) {
      // Whatever the adapter does on leave, the call record still gets its end.
      await this.gateway.parts.adapter.leave(this.join, reason).catch((error: Error) => log.warn({ callId: this.callId, err: error.message }, "sip: leave failed"));
    }
    await this.record.ended(reason, status, leg?.media?.counts);
  }
}
