/**
 * Parley's one error shape, `{ error: { code, message } }`, and every error code it uses.
 * Services throw AppError with a code; the HTTP layer turns it into the shape and status.
 */
import { t } from "elysia";

export const ERROR_STATUS = {
  bad_request: 400,
  invalid_json: 400,
  validation_failed: 422,
  unauthorized: 401,
  invalid_api_key: 401,
  invalid_token: 401,
  token_expired: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  /** The conference mapper's answer to missing or malformed input, as the interface fixes it. */
  invalid_mapper_input: 405,
  /** Jicofo's reservation contract: the reservation's time is over. */
  reservation_expired: 419,
  payload_too_large: 413,
  unsupported_media_type: 415,
  internal: 500,
  dependency_down: 503,
  timeout: 504,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

export class AppError extends Error {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    message: string,
    /** Extra members placed beside `error` in the body, such as `conflict_id`. */
    readonly extra?: Record<string, unknown>,
    status?: number,
  ) {
    super(message);
    this.status = status ?? ERROR_STATUS[code];
  }
}

export function errorBody(code: string, message: string, extra?: Record<string, unknown>) {
  return { ...extra, error: { code, message } };
}

export const ErrorModel = t.Object(
  {
    error: t.Object({
      code: t.String({ examples: ["token_expired"] }),
      message: t.String(),
    }),
  },
  { additionalProperties: true, description: "Parley's error shape" },
);

/** Response schemas for the error statuses a route may answer. */
export function errorResponses(...statuses: number[]) {
  return Object.fromEntries(statuses.map((status) => [status, ErrorModel])) as Record<number, typeof ErrorModel>;
}
