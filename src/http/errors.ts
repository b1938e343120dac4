/**
 * Parley's one error shape on HTTP, `{ error: { code, message } }`, and the status of every
 * error code (src/core/errors.ts lists the codes; services throw AppError with one).
 */
import { t } from "elysia";
import type { ErrorCode } from "../core/errors";

export const ERROR_STATUS = {
  bad_request: 400,
  invalid_json: 400,
  validation_failed: 422,
  unauthorized: 401,
  invalid_api_key: 401,
  invalid_token: 401,
  operator_credential_required: 401,
  invalid_operator_token: 401,
  token_expired: 401,
  forbidden: 403,
  not_found: 404,
  method_not_allowed: 405,
  conflict: 409,
  /** The interface fixes this status for the conference mapper's missing or malformed input. */
  invalid_mapper_input: 405,
  /** Prosody's status for a finished reservation (Jicofo's reservation contract). */
  reservation_expired: 419,
  payload_too_large: 413,
  unsupported_media_type: 415,
  rate_limited: 429,
  quota_exceeded: 429,
  internal: 500,
  overloaded: 503,
  /** Permanent until an operator sets the feature up; 501 and no Retry-After, so clients do not retry it. */
  not_configured: 501,
  dependency_down: 503,
  timeout: 504,
} as const satisfies Record<ErrorCode, number>;

export function errorBody(code: string, message: string, extra?: Record<string, unknown>) {
  return { ...extra, error: { code, message } };
}

/** Where the published description keeps the error shape (src/http/openapi.ts). */
export const ERROR_SCHEMA_REF = "#/components/schemas/Error";

export const ErrorModel = t.Object(
  {
    error: t.Object({
      code: t.UnionEnum(Object.keys(ERROR_STATUS) as [ErrorCode, ...ErrorCode[]], {
        description: "What went wrong, one of a fixed list (docs/architecture.md); the status follows from it",
        // UnionEnum gives its first value as default, which an answer's code has not.
        default: undefined,
      }),
      message: t.String({ description: "For people: what was wrong, naming the field where one was" }),
    }),
  },
  {
    additionalProperties: true,
    description: "Parley's error shape; some answers add members beside `error`, such as `conflict_id`",
  },
);

/** Response schemas for the error statuses a route may answer. */
export function errorResponses(...statuses: number[]) {
  return Object.fromEntries(statuses.map((status) => [status, ErrorModel])) as Record<number, typeof ErrorModel>;
}
