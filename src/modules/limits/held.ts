/**
 * Caps on what a request holds open while it lasts: LL-HLS requests that wait for a part,
 * event streams, sockets. Each is counted in this process's memory, per caller and for the
 * whole process, and a slot is given back the moment its connection ends, so a process that
 * crashes leaks nothing and a flood is refused without a round trip. A caller's cap holds
 * per process: with N API processes its effective cap is N times it (docs/limits.md#caps).
 */
import { AppError } from "../../core/errors";
import { reportHeld } from "../../http/metrics";
import { errorAnswers } from "../../http/openapi";
import { LimitExceeded } from "./service";

/** One way to count callers: by address, API key, account, token, user, stream. */
export interface CallerCap {
  /** The cap's name, as docs/limits.md, the message and RateLimit-Policy give it: `sockets.per_token`. */
  name: string;
  /** Whose count it is, for messages and metrics: `address`, `API key`. */
  per: string;
  /** 0 turns the cap off. */
  cap: () => number;
  /**
   * 429 when the caller is the one holding too much; 503 when the cap shares out the process
   * (one stream's viewers among many), which the caller did not fill alone.
   */
  refusal: 429 | 503;
}

export interface HeldDefinition {
  /** The resource as metrics name it: `llhls_waits`. */
  resource: string;
  /** What one slot is, in the plural, for messages: `event streams`. */
  what: string;
  perProcess: { name: string; cap: () => number };
  callers: CallerCap[];
  /** What Retry-After says: a slot frees when a connection ends, not at a set time. */
  retryAfterSeconds: number;
  /** What frees a slot, for the refusal's message: `close one`. */
  free: string;
  /** Members the route's clients expect beside `error` in a refusal, such as startRecording's `started: false`. */
  extra?: Record<string, unknown>;
}

/** Gives the slot back; a second call does nothing, so every way a connection ends may call it. */
export type Release = () => void;

export class HeldResource {
  private inUse = 0;
  private readonly byCaller: Array<Map<string, number>>;
  private readonly refused: Record<string, number> = {};

  constructor(private readonly definition: HeldDefinition) {
    this.byCaller = definition.callers.map(() => new Map());
    reportHeld(() => ({
      resource: definition.resource,
      inUse: this.inUse,
      caps: Object.fromEntries([
        ["process", definition.perProcess.cap()],
        ...definition.callers.map((caller) => [caller.per, caller.cap()] as const),
      ]),
      refused: { ...this.refused },
    }));
  }

  /**
   * Takes a slot for the callers named, one key per CallerCap in order (undefined: not counted
   * that way, as a request made in-process has no address), or throws: a
   * LimitExceeded (429 quota_exceeded) at a caller's cap, an AppError `overloaded` (503) at a
   * shared one or the process's. Every refusal carries `retry_after`.
   */
  take(keys: Array<string | undefined>): Release {
    this.hold(keys);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.give(keys);
    };
  }

  /**
   * Takes a slot as `take` does, for a holder that gives it back itself with `give` and the
   * same keys, exactly once: one that keeps no closure per slot (every open socket is one).
   */
  hold(keys: Array<string | undefined>): void {
    const { callers, perProcess } = this.definition;
    callers.forEach((caller, i) => {
      const key = keys[i];
      const cap = caller.cap();
      if (key === undefined || cap === 0) return;
      if ((this.byCaller[i]!.get(key) ?? 0) >= cap)
        throw this.refusal(caller.name, caller.refusal, cap, `per ${caller.per}`);
    });
    const cap = perProcess.cap();
    if (this.inUse >= cap) throw this.refusal(perProcess.name, 503, cap, "in this process");
    this.inUse++;
    this.count(keys, 1);
  }

  give(keys: Array<string | undefined>): void {
    this.inUse--;
    this.count(keys, -1);
  }

  /** The refusals this cap answers, as a route's `detail.responses` declare them (src/http/openapi.ts). */
  answers() {
    const perCaller = this.definition.callers.some((caller) => caller.refusal === 429);
    return perCaller ? errorAnswers("429", "503") : errorAnswers("503");
  }

  private count(keys: Array<string | undefined>, by: 1 | -1): void {
    this.byCaller.forEach((counts, i) => {
      const key = keys[i];
      if (key === undefined) return;
      const now = (counts.get(key) ?? 0) + by;
      // Callers that hold nothing leave no entry, so the maps stay as large as what is held.
      if (now === 0) counts.delete(key);
      else counts.set(key, now);
    });
  }

  private refusal(name: string, status: 429 | 503, cap: number, scope: string): AppError {
    const { what, free, retryAfterSeconds, extra } = this.definition;
    this.refused[name] = (this.refused[name] ?? 0) + 1;
    const then = `${free}, or retry in ${retryAfterSeconds} s`;
    const message = `cap ${name} reached: at most ${cap} ${what} at once ${scope}; ${then}`;
    if (status === 503) return new AppError("overloaded", message, { ...extra, retry_after: retryAfterSeconds });
    return new LimitExceeded(
      "quota_exceeded",
      message,
      [{ name, quota: cap, remaining: 0, resetSeconds: retryAfterSeconds }],
      retryAfterSeconds,
      extra,
    );
  }
}
