/**
 * A conference id keyed in by a caller who named no room: digits arrive as RFC 4733 events
 * (see media.ts) or SIP INFO, # ends an entry, * starts it over. An entry is looked up in the
 * conference mapper; a wrong one is allowed SIP_DTMF_ATTEMPTS times, and the caller has
 * SIP_DTMF_TIMEOUT_MS for each try.
 */
import type { Info } from "sip.js";
import type { SipConfig } from "../src/core/config";
import { isDependencyDown } from "../src/core/errors";
import { log } from "../src/core/log";
import type { ResolvedRoom } from "./rooms";

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

/** Answers a SIP INFO: 200 with the digit it carries, or 415 when it carries none. */
export function answerInfo(info: Info): string | undefined {
  const request = info.request;
  const digit = infoDigit(request.getHeader("content-type") ?? "", request.body ?? "");
  if (digit === undefined) {
    info.reject({ statusCode: 415, extraHeaders: ["Accept: application/dtmf-relay, application/dtmf"] });
    return undefined;
  }
  info.accept();
  return digit;
}

/** What the prompt needs of its call. */
export interface PromptedCall {
  readonly callId: string;
  /** The mapper's room for a keyed-in id, or null when the id is unknown. */
  lookUp(id: string): Promise<ResolvedRoom | null>;
  /** False once the call is no longer established: a late look-up is then ignored. */
  established(): boolean;
  /** The entry named a room: the call goes on to it. */
  found(room: ResolvedRoom): Promise<void>;
  hangUp(reason: string): void;
}

export class ConferenceIdPrompt {
  private entry: DigitEntry | undefined;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private wrongEntries = 0;

  constructor(
    private readonly call: PromptedCall,
    private readonly settings: Pick<SipConfig, "dtmfAttempts" | "dtmfTimeoutMs">,
  ) {
    this.entry = new DigitEntry((id) => {
      this.check(id).catch((error: Error) => {
        log.error({ callId: call.callId, err: error.message }, "sip: conference id look-up failed");
        call.hangUp(isDependencyDown(error) ? "dependency_down" : "gateway_error");
      });
    });
    this.restartTimer();
  }

  push(digit: string): void {
    this.entry?.push(digit);
  }

  /** The call ended or found its room: no more digits, no more timeout. */
  stop(): void {
    this.entry = undefined;
    clearTimeout(this.timer);
  }

  private restartTimer(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.call.hangUp("dtmf_timeout"), this.settings.dtmfTimeoutMs);
  }

  private async check(id: string): Promise<void> {
    if (!this.entry) return;
    const resolved = await this.call.lookUp(id);
    if (!this.call.established() || !this.entry) return;
    if (!resolved) {
      this.wrongEntries++;
      log.info({ callId: this.call.callId, attempt: this.wrongEntries }, "sip: unknown conference id keyed in");
      if (this.wrongEntries >= this.settings.dtmfAttempts) this.call.hangUp("dtmf_failed");
      else this.restartTimer();
      return;
    }
    this.stop();
    await this.call.found(resolved);
  }
}
