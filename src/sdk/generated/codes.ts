/**
 * The error codes Parley answers in `error.code` (src/core/errors.ts, each with its HTTP status in
 * src/http/errors.ts) and the types of its event catalogue (src/modules/catalogue/event-types.ts).
 * Do not edit: `npm run sdk:types` writes it again, and test/sdk/types.test.ts fails when it no
 * longer matches the server. A later server may add to either list, so code that switches on
 * one keeps a default.
 */

export const PARLEY_ERROR_CODES = [
  "bad_request",
  "invalid_json",
  "validation_failed",
  "unauthorized",
  "invalid_api_key",
  "invalid_token",
  "operator_credential_required",
  "invalid_operator_token",
  "token_expired",
  "forbidden",
  "not_found",
  "method_not_allowed",
  "conflict",
  "invalid_mapper_input",
  "reservation_expired",
  "payload_too_large",
  "unsupported_media_type",
  "rate_limited",
  "quota_exceeded",
  "internal",
  "overloaded",
  "not_configured",
  "dependency_down",
  "timeout",
] as const;
export type ParleyErrorCode = (typeof PARLEY_ERROR_CODES)[number];

export const PARLEY_EVENT_TYPES = [
  "room.started",
  "room.ended",
  "participant.joined",
  "participant.left",
  "conference.started",
  "conference.ended",
  "reservation.created",
  "reservation.deleted",
  "stream.queued",
  "stream.started",
  "stream.failed",
  "stream.stopped",
  "recording.ready",
  "call.started",
  "call.ended",
  "usage.day_settled",
  "endpoint.circuit_opened",
  "endpoint.circuit_closed",
  "endpoint.disabled",
] as const;
export type ParleyEventType = (typeof PARLEY_EVENT_TYPES)[number];
