/** Errors the SDK throws: every failure carries the API's `error.code` and the HTTP status. */
import type { ParleyErrorCode } from "./generated/codes.js";

export type { ParleyErrorCode } from "./generated/codes.js";

/** What the SDK itself reports: no answer came, or a webhook did not verify. */
export type LocalErrorCode = "network_error" | "invalid_signature";

/**
 * A request Parley refused, or one that got no answer. `code` is the API's `error.code`
 * (`unauthorized`, `not_found`, `validation_failed`, `rate_limited`, …); `status` the HTTP
 * status, 0 when no answer came (`network_error`) or nothing was sent (`invalid_signature`).
 */
export class ParleyError extends Error {
  override readonly name: string = "ParleyError";
  constructor(
    readonly code: ParleyErrorCode | LocalErrorCode | (string & {}),
    message: string,
    readonly status: number,
    /** The answer's body as Parley sent it, when there was one. */
    readonly body?: unknown,
  ) {
    super(message);
  }
}

/** A webhook whose signature, timestamp or payload did not verify: answer it with 400 and drop it. */
export class WebhookVerificationError extends ParleyError {
  override readonly name = "WebhookVerificationError";
  constructor(message: string) {
    super("invalid_signature", message, 0);
  }
}

/** The error an answer's body describes, `{error:{code,message}}`, or one named after its status. */
export function errorFromAnswer(status: number, body: unknown): ParleyError {
  const described = (body as { error?: { code?: unknown; message?: unknown } } | undefined)?.error;
  if (described && typeof described.code === "string") {
    return new ParleyError(
      described.code,
      typeof described.message === "string" ? described.message : described.code,
      status,
      body,
    );
  }
  const text = typeof body === "string" && body.length > 0 ? `: ${body.slice(0, 200)}` : "";
  return new ParleyError(`http_${status}`, `Parley answered ${status}${text}`, status, body);
}
