/** Verifying Parley's webhooks (Standard Webhooks signatures) into typed events. */
import { Webhook } from "standardwebhooks";
import { WebhookVerificationError } from "./errors.js";
import type { ParleyEventType } from "./generated/codes.js";
import type { paths } from "./generated/openapi.js";

/** One event of Parley's catalogue (docs/webhooks.md): narrow it by `type` to get its `data`. */
export type ParleyEvent =
  paths["/api/v1/events"]["get"]["responses"][200]["content"]["application/json"]["events"][number];
export type { ParleyEventType } from "./generated/codes.js";
/** The event of one type, e.g. `EventOf<"room.ended">`. */
export type EventOf<T extends ParleyEventType> = Extract<ParleyEvent, { type: T }>;

/**
 * Request headers as a server framework hands them over: a
 * Headers object, or a plain record (Node's IncomingHttpHeaders).
 */
export type WebhookHeaders = Headers | Record<string, string | string[] | undefined>;

function headerRecord(headers: WebhookHeaders): Record<string, string> {
  const record: Record<string, string> = {};
  if (typeof (headers as Headers).forEach === "function" && typeof (headers as Headers).get === "function") {
    (headers as Headers).forEach((value, name) => {
      record[name.toLowerCase()] = value;
    });
    return record;
  }
  for (const [name, value] of Object.entries(headers as Record<string, string | string[] | undefined>)) {
    if (value !== undefined) record[name.toLowerCase()] = Array.isArray(value) ? value.join(" ") : value;
  }
  return record;
}

/**
 * Checks a delivery's `webhook-signature` against the endpoint's secret (`whsec_…`; during a
 * rotation either the new or the old one), that its `webhook-timestamp` is within five
 * minutes, and returns the event. `body` must be the raw bytes or text as received: a body
 * parsed and serialized again no longer matches its signature. Throws
 * WebhookVerificationError otherwise. De-duplicate by the event's `id` (the `webhook-id`).
 */
export function verifyWebhook(
  headers: WebhookHeaders,
  body: string | Uint8Array,
  secret: string | readonly string[],
): ParleyEvent {
  const payload = typeof body === "string" ? body : new TextDecoder().decode(body);
  const record = headerRecord(headers);
  let last: unknown;
  for (const candidate of typeof secret === "string" ? [secret] : secret) {
    try {
      return new Webhook(candidate).verify(payload, record) as ParleyEvent;
    } catch (error) {
      last = error;
    }
  }
  throw new WebhookVerificationError(last instanceof Error ? last.message : "no secret given");
}
