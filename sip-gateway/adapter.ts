/**
 * The seam between the gateway and the conference: the gateway answers the call and
 * resolves its room; the adapter puts the caller into that room. The shipped adapter
 * tells an operator's media bridge by HTTP (or, with no URL configured, only lets the
 * gateway record the join), since the gateway itself carries no audio into conferences.
 */
import { log } from "../src/core/log";

export interface ConferenceJoin {
  callId: string;
  accountId: string;
  room: string;
  conference?: string;
  caller: string;
  callee: string;
  /** Where the caller's audio is (from its SDP) and where the gateway receives it. */
  media: { codec?: string; payloadType?: number; remoteAddress?: string; remotePort?: number; gatewayPort?: number };
}

export interface ConferenceAdapter {
  /** Resolves once the conference side has the caller; a rejection ends the call. */
  join(call: ConferenceJoin): Promise<void>;
  leave(call: ConferenceJoin, reason: string): Promise<void>;
}

export class HttpConferenceAdapter implements ConferenceAdapter {
  constructor(
    private readonly url: string | undefined,
    private readonly timeoutMs: number,
  ) {}

  join(call: ConferenceJoin): Promise<void> {
    return this.post({ event: "join", ...call });
  }

  async leave(call: ConferenceJoin, reason: string): Promise<void> {
    // A failed leave notice cannot change anything for the caller, who is gone: log it only.
    await this.post({ event: "leave", reason, ...call }).catch((error: Error) =>
      log.warn({ callId: call.callId, err: error.message }, "sip: conference adapter leave failed"),
    );
  }

  private async post(body: Record<string, unknown>): Promise<void> {
    if (!this.url) return;
    const response = await fetch(this.url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(this.timeoutMs),
    });
    await response.arrayBuffer();
    if (!response.ok) throw new Error(`conference adapter answered ${response.status}`);
  }
}
