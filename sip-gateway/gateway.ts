/**
 * The SIP gateway: one sip.js user agent per transport (UDP, TCP, TLS), each on its own
 * endpoint so Via and Contact name the right transport and port, and the trunk registration.
 * Every incoming INVITE becomes a `PhoneCall` (phone-call.ts) that resolves its room, answers,
 * joins the conference, and records what happened.
 */
import { Core, Grammar, type Invitation, Registerer, RegistererState, UserAgent, type UserAgentOptions } from "sip.js";
import type { SipConfig } from "../src/core/config";
import { isDependencyDown } from "../src/core/errors";
import { log } from "../src/core/log";
import type { ConferenceAdapter } from "./adapter";
import { MediaEndpoints } from "./bridge";
import { type CallHost, PhoneCall } from "./phone-call";
import { SourceGuard } from "./guard";
import { mediaFactory } from "./media";
import { ServerTransactions } from "./merged-requests";
import { viaSource } from "./message";
import { memoizedParse } from "./parse-memo";
import type { ConferenceDirectory } from "./rooms";
import { TcpEndpoint } from "./tcp-endpoint";
import { CONTACT_USER, EndpointTransport, type SipEndpoint } from "./transport";
import { UdpEndpoint } from "./udp-endpoint";

// Every sip.js parse goes through Grammar.parse (parse-memo.ts says why it is memoized).
Object.assign(Grammar, { parse: memoizedParse(Grammar.parse) });

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

export class SipGateway implements CallHost {
  readonly calls = new Map<string, PhoneCall>();
  /** Calls going on per source address (SIP_MAX_CALLS_PER_SOURCE); a source with none has no entry. */
  private readonly callsBySource = new Map<string, number>();
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

  get settings(): SipConfig {
    return this.parts.settings;
  }

  get directory(): ConferenceDirectory {
    return this.parts.directory;
  }

  get adapter(): ConferenceAdapter {
    return this.parts.adapter;
  }

  /** The user agent whose transport reaches a URI: TCP when it says so, else UDP when open. */
  agentFor(uri: string): UserAgent | undefined {
    const protocol =
      /;transport=tls/i.test(uri) || uri.startsWith("sips:") ? "TLS" : /;transport=tcp/i.test(uri) ? "TCP" : "UDP";
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
    if (settings.tls.port !== 0)
      this.endpoints.push(
        TcpEndpoint.open(settings, guard, settings.tls.port, settings.tls as { certPath: string; keyPath: string }),
      );
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
      logConnector: (level, category, _label, content) =>
        log[level === "log" ? "debug" : level]({ category }, `sip.js: ${content}`),
      delegate: { onInvite: (invitation) => this.onInvite(invitation, endpoint) },
      ...(registers ? { authorizationUsername: trunk.username, authorizationPassword: trunk.password } : {}),
    };
    const agent = new UserAgent(options);
    // Indexed for the merged-request check (see merged-requests.ts); sip.js only gets, sets and deletes.
    const core = agent.userAgentCore as unknown as { userAgentServers: Map<string, unknown> };
    core.userAgentServers = new ServerTransactions();
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
    this.registerer = new Registerer(agent, {
      registrar: UserAgent.makeURI(trunk.registrar!),
      expires: trunk.expiresSeconds,
    });
    this.registerer.stateChange.addListener((state) =>
      log.info({ state, registrar: trunk.registrar }, "sip: trunk registration"),
    );
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
    const { maxCalls, maxCallsPerSource } = this.parts.settings;
    const source = viaSource(request.getHeader("via") ?? "");
    const fromSource = source === undefined ? 0 : (this.callsBySource.get(source) ?? 0);
    if (
      this.stopping ||
      this.calls.size >= maxCalls ||
      (maxCallsPerSource > 0 && source !== undefined && fromSource >= maxCallsPerSource)
    ) {
      // 503 with Retry-After: a proxy or trunk tries another gateway, or this one later.
      invitation.reject({ statusCode: 503, extraHeaders: ["Retry-After: 5"] });
      return;
    }
    if (source !== undefined) this.callsBySource.set(source, fromSource + 1);
    const call = new PhoneCall(this, invitation, endpoint.protocol);
    // A second INVITE with the same Call-ID and a new From tag is a new call: key by both.
    const key = `${request.callId}|${request.fromTag}`;
    this.calls.set(key, call);
    call.finished.then(() => {
      this.calls.delete(key);
      if (source === undefined) return;
      const left = (this.callsBySource.get(source) ?? 1) - 1;
      if (left === 0) this.callsBySource.delete(source);
      else this.callsBySource.set(source, left);
    });
    call.run().catch((error: Error) => {
      // A caller refused for an outage may redial; 503 tells its proxy to try elsewhere or later.
      const outage = isDependencyDown(error);
      log.error(
        { callId: request.callId, err: error.message },
        outage ? "sip: call failed, a dependency is down" : "sip: call failed",
      );
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
