/**
 * Parley's errors, free of any transport: a code from one list, a message, and members a
 * client expects beside them. Services throw AppError; the HTTP pipeline (src/http/errors.ts
 * holds the status of each code) and the socket turn it into their own answer.
 */

export type ErrorCode =
  | "bad_request"
  | "invalid_json"
  | "validation_failed"
  | "unauthorized"
  | "invalid_api_key"
  | "invalid_token"
  /** An admin route asked with no operator credential, or with an account's API key or token. */
  | "operator_credential_required"
  /** An operator token that is unknown or revoked. */
  | "invalid_operator_token"
  | "token_expired"
  | "forbidden"
  | "not_found"
  /** The path exists, but not for this method (the answer's Allow header lists those it takes). */
  | "method_not_allowed"
  | "conflict"
  /** The conference mapper's answer to missing or malformed input, as the interface fixes it. */
  | "invalid_mapper_input"
  /** Jicofo's reservation contract: the reservation's time is over. */
  | "reservation_expired"
  | "payload_too_large"
  | "unsupported_media_type"
  /** A per-account rate limit (requests, socket messages, tokens) is used up for now; see docs/limits.md. */
  | "rate_limited"
  /** A per-account quota (live streams, recordings, stored chat bytes) is full. */
  | "quota_exceeded"
  | "internal"
  /** This process holds as many of something (sockets, event streams, LL-HLS waits) as it may; see docs/limits.md. */
  | "overloaded"
  /** A feature this deployment left without its settings (uploads without S3): asking again will not help. */
  | "not_configured"
  | "dependency_down"
  | "timeout";

export class AppError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    /** Members a client expects beside the code and message, such as `conflict_id` (beside `error` in an HTTP body). */
    readonly extra?: Record<string, unknown>,
  ) {
    super(message);
  }
}

/**
 * What a client is told to wait (Retry-After, seconds) when a
 * dependency is down: long enough for a restart or fail-over.
 */
export const DEPENDENCY_RETRY_AFTER_SECONDS = 5;

/** Socket-level failures (Node, postgres.js, ioredis): the peer is unreachable, not the request wrong. */
const CONNECTION_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
  "CONNECT_TIMEOUT",
  // Parley's own: Redis lost or silent past the bound a request gives it (src/queue/connection.ts).
  "REDIS_UNAVAILABLE",
]);

/**
 * PostgreSQL's own answers meaning "not now": class 08 (connection exception), shutting down
 * or starting (57P01-57P03), too many connections (53300), and a write on a server that is
 * read-only (25006): a standby, as during a failover before the new primary is found, or as
 * when DATABASE_URL names only standbys, which an operator fixes and no caller can.
 */
const UNAVAILABLE_SQLSTATE = /^(08...|57P0[123]|53300|25006)$/;

/** Messages that carry no code: PGlite closing, ioredis with its connection gone or its command timeout passed. */
const UNAVAILABLE_MESSAGE = new RegExp(
  `^(${[
    "PGlite is clos(ed|ing)",
    "Connection is closed\\.",
    "Reached the max retries per request limit",
    "Command timed out",
    "Stream isn't writeable and enableOfflineQueue options is false",
  ].join("|")})`,
);

/**
 * Whether an error means a dependency (PostgreSQL, PGlite, Redis) cannot be reached, as
 * opposed to a bug or bad input. Follows `cause`, since drizzle wraps driver errors.
 */
export function isDependencyDown(error: unknown): boolean {
  return dependencyFailure(error) !== undefined;
}

/**
 * The driver's own error behind a dependency failure, for the log: drizzle's wrapper
 * message carries the query and its parameters, which are not for the log.
 */
export function dependencyFailure(error: unknown): string | undefined {
  for (let current = error, depth = 0; current instanceof Error && depth < 5; current = current.cause, depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === "string" && (CONNECTION_CODES.has(code) || UNAVAILABLE_SQLSTATE.test(code)))
      return current.message;
    if (UNAVAILABLE_MESSAGE.test(current.message)) return current.message;
  }
  return undefined;
}

/**
 * What the log keeps of an unexpected error: the message and code of it and of each cause
 * (the driver's, behind drizzle's wrapper), and a failed query's statement without its
 * parameters, which carry callers' data; the stack's first line repeats the message, so a
 * wrapper's is left out too.
 */
export function loggableError(error: unknown): { causes: Array<{ message: string; code?: string }>; stack?: string } {
  const causes: Array<{ message: string; code?: string }> = [];
  for (let current = error, depth = 0; current instanceof Error && depth < 5; current = current.cause, depth++) {
    const query = (current as { query?: unknown }).query;
    const code = (current as { code?: unknown }).code;
    causes.push({
      message: typeof query === "string" ? `failed query: ${query}` : current.message,
      ...(typeof code === "string" ? { code } : {}),
    });
  }
  if (!(error instanceof Error)) return { causes: [{ message: String(error) }] };
  const wrapped = typeof (error as { query?: unknown }).query === "string";
  const frames = error.stack?.split("\n").filter((line) => /^\s+at /.test(line));
  return { causes, stack: wrapped ? frames?.join("\n") : error.stack };
}
