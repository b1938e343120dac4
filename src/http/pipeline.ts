/**
 * What every request goes through: a request id, the one error shape, a structured log
 * line and the route's metrics. Credentials never reach the log: only method, route,
 * status and timing are written, never headers, bodies or query strings.
 */
import { randomUUID } from "node:crypto";
import { Elysia } from "elysia";
import { parseQuery } from "elysia/parse-query";
import { config } from "../core/config";
import { AppError, DEPENDENCY_RETRY_AFTER_SECONDS, dependencyFailure, loggableError } from "../core/errors";
import { acceptedTypesOf } from "./accepts";
import { ERROR_STATUS, errorBody } from "./errors";
import { log } from "../core/log";
import { methodsServed } from "./methods";
import { observeRequest } from "./metrics";
import { firstUnstorable, isNameSchema, NAME_REASON, reasonOf } from "./text";

interface RequestMeta {
  id: string;
  startedAt: number;
}

const meta = new WeakMap<Request, RequestMeta>();
/** Health checks, logged at debug. */
const PROBES = new Set(["/healthz", "/readyz"]);
const INCOMING_ID = /^[\w.:-]{1,128}$/;

/**
 * A chunked body that is not JSON. Refusing it here would answer before the route's guard
 * (which runs after parsing), so it stands as a body no schema accepts, and validation
 * reports it as unparsable.
 */
const UNPARSABLE = Symbol("unparsable body");
/** A body over the limit, unread (declared) or read no further (chunked): refused once the credential was checked. */
const TOO_LARGE = Symbol("body too large");
const oversize = new WeakSet<Request>();
/** The media type of a request's non-empty body, as sent ("" when it came without one). */
const bodyType = new WeakMap<Request, string>();

function tooLarge(): AppError {
  return new AppError("payload_too_large", `the body may be at most ${config.http.maxBodyBytes} bytes`);
}

/** Reads a body sent without Content-Length, giving up as soon as it passes the limit (then undefined). */
async function readCapped(body: ReadableStream<Uint8Array>, limit: number): Promise<string | undefined> {
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => {});
      return undefined;
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString("utf8");
}

interface SchemaError {
  path?: string;
  message?: string;
  summary?: string;
  value?: unknown;
  schema?: { enum?: unknown[]; anyOf?: Array<{ const?: unknown }>; format?: string };
  errors?: Iterable<SchemaError>[];
}

/**
 * A union's own report stops at the union (`should be one of: 'array', 'null'`); the
 * variant that got furthest into the value says what is actually wrong, e.g. the one
 * unknown item of an array.
 */
function deepest(error: SchemaError): SchemaError {
  let best = error;
  for (const variant of error.errors ?? []) {
    for (const inner of variant) {
      const candidate = deepest(inner);
      if ((candidate.path ?? "").length > (best.path ?? "").length) best = candidate;
    }
  }
  return best;
}

/** The values a schema allows, when it is a list of them (an enum, or a union of literals). */
function allowedValues(schema: SchemaError["schema"]): unknown[] | undefined {
  if (schema?.enum) return schema.enum;
  if (schema?.anyOf?.length && schema.anyOf.every((variant) => "const" in variant))
    return schema.anyOf.map((variant) => variant.const);
  return undefined;
}

/**
 * The query member a failure of Elysia's per-member check came from: that check (type
 * `property`) reports the value it read but not the member's name, so the name is the one
 * member that holds that value. Undefined when none or several do.
 */
function queryMemberHolding(request: Request, value: unknown): string | undefined {
  const holders = [...new URL(request.url).searchParams].filter(
    ([, raw]) => raw === String(value) || (typeof value === "number" && raw.trim() !== "" && Number(raw) === value),
  );
  return holders.length === 1 ? `query.${holders[0]![0]}` : undefined;
}

/**
 * The first field path and reason of a schema failure, e.g. `body.user.email: Expected string to match 'email' format`.
 */
function describeValidation(error: { all?: SchemaError[]; type?: string }, request: Request) {
  const first = error.all?.[0];
  if (!first) return "the request does not match the schema";
  const found = deepest(first);
  const path = (found.path ?? "").replace(/^\//, "").replaceAll("/", ".");
  const member = error.type === "property" && path === "" ? queryMemberHolding(request, found.value) : undefined;
  const where = member ?? [error.type === "body" ? "" : error.type, path].filter(Boolean).join(".");
  const allowed = allowedValues(found.schema);
  const reason =
    reasonOf(found.schema) ??
    (allowed
      ? `${JSON.stringify(found.value)} is not one of: ${allowed.join(", ")}`
      : isNameSchema(found.schema)
        ? NAME_REASON
        : found === first
          ? (first.summary ?? first.message ?? "invalid")
          : (found.message ?? "invalid"));
  return `${where || error.type || "request"}: ${reason}`;
}

/**
 * Requests whose body began like a JSON document but came as form or text (curl's -d says
 * form-urlencoded, fetch's string body text/plain): parsed as that type, the schema would
 * report a missing field where the content type is what is wrong.
 */
const jsonUnderAnotherType = new WeakSet<Request>();

/**
 * Why the request's body is refused before its content is looked at: larger than the limit
 * (413), or of a type the route does not take (415). Asked once the route's guard has checked
 * the credential, so a caller without one learns neither.
 */
function bodyRefusal(request: Request): AppError | undefined {
  if (oversize.has(request)) return tooLarge();
  const sent = bodyType.get(request);
  const accepted = acceptedTypesOf(request);
  if (sent === undefined || accepted.includes(sent)) return undefined;
  const came = sent ? `came with content-type: ${request.headers.get("content-type")}` : "came without a content-type";
  if (jsonUnderAnotherType.has(request) && accepted.includes("application/json"))
    return new AppError(
      "unsupported_media_type",
      `the body is JSON but ${came}; send it with content-type: application/json`,
    );
  return new AppError("unsupported_media_type", `the body ${came}; this route takes ${accepted.join(" or ")}`);
}

/** The id a request is answered and logged with: the caller's, when it sent a sane one. */
export function requestIdOf(request: Request): string {
  const incoming = request.headers.get("x-request-id");
  return incoming && INCOMING_ID.test(incoming) ? incoming : randomUUID();
}

/** The Retry-After of a refusal that says when to come back (a limit's or a cap's `retry_after`). */
function retryAfterOf(error: AppError): string | undefined {
  const seconds = error.extra?.retry_after;
  return typeof seconds === "number" ? String(seconds) : undefined;
}

/** Counts an answered request in the route's metrics and writes its log line. */
export function recordRequest(method: string, route: string, status: number, info: RequestMeta): void {
  const seconds = (performance.now() - info.startedAt) / 1000;
  observeRequest(method, route, status, seconds);
  // Probes come every few seconds from load balancers and orchestrators: at info they would drown the rest.
  const level = PROBES.has(route) ? "debug" : "info";
  log[level]({ requestId: info.id, method, route, status, ms: Math.round(seconds * 1e4) / 10 }, "request");
}

/**
 * The error shape's answer to what a route answered outside the pipeline threw, as the
 * pipeline's own error hook answers it: an AppError's code and status, a dependency that is
 * down as 503 with Retry-After, anything else as a logged 500.
 */
export function errorResponse(error: unknown, requestId: string): Response {
  const headers: Record<string, string> = { "x-request-id": requestId };
  const answer = (status: number, body: unknown) => {
    const retry = error instanceof AppError ? retryAfterOf(error) : undefined;
    if (retry !== undefined) headers["retry-after"] = retry;
    else if (status === 503) headers["retry-after"] = String(DEPENDENCY_RETRY_AFTER_SECONDS);
    return Response.json(body, { status, headers });
  };
  if (error instanceof AppError)
    return answer(ERROR_STATUS[error.code], errorBody(error.code, error.message, error.extra));
  const failure = dependencyFailure(error);
  if (failure) {
    log.warn({ requestId, err: failure }, "dependency down");
    return answer(503, errorBody("dependency_down", "a service Parley depends on is unavailable; retry later"));
  }
  log.error({ requestId, err: loggableError(error) }, "unhandled error");
  return answer(500, errorBody("internal", "internal error"));
}

export const pipeline = new Elysia({ name: "parley.pipeline" })
  .onRequest(({ request, set }) => {
    const id = requestIdOf(request);
    meta.set(request, { id, startedAt: performance.now() });
    set.headers["x-request-id"] = id;
    if (Number(request.headers.get("content-length") ?? 0) > config.http.maxBodyBytes) oversize.add(request);
  })
  // Bun's own limit answers a bare 413 before any hook runs, so it is set far above
  // MAX_BODY_BYTES (src/process/server.ts) and the limit is kept here, in the error shape: a declared
  // length above, a body without one (chunked) while it is read. Declared bodies parse as usual.
  // Form and text bodies are read here too, to notice JSON sent under their type.
  .onParse({ as: "global" }, async ({ request, contentType }) => {
    if (oversize.has(request)) return TOO_LARGE;
    const chunked = !request.headers.has("content-length");
    const mediaType = (request.headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
    if (request.body && !chunked && Number(request.headers.get("content-length")) > 0) bodyType.set(request, mediaType);
    const asText =
      contentType === "" || contentType === "application/x-www-form-urlencoded" || contentType.startsWith("text/");
    if (!request.body || (!chunked && !asText)) return;
    const text = chunked ? await readCapped(request.body, config.http.maxBodyBytes) : await request.text();
    if (text === undefined) {
      oversize.add(request);
      return TOO_LARGE;
    }
    if (chunked && text !== "") bodyType.set(request, mediaType);
    if (asText && /^\s*[[{]/.test(text)) jsonUnderAnotherType.add(request);
    if (contentType === "application/x-www-form-urlencoded") return parseQuery(text);
    if (contentType !== "application/json") return text;
    if (text.trim() === "") return {};
    try {
      return JSON.parse(text);
    } catch {
      return UNPARSABLE;
    }
  })
  // Declared fields are checked by their Text type during validation; this catches the
  // free-form rest (callback bodies, query members no schema names) before a handler sees it.
  .onBeforeHandle({ as: "global" }, ({ request, body, query, params }) => {
    const refusal = bodyRefusal(request);
    if (refusal) throw refusal;
    const found = firstUnstorable(body) ?? firstUnstorable(query, "query") ?? firstUnstorable(params, "params");
    if (found) throw new AppError("bad_request", `${found.path}: ${found.reason}`);
  })
  .onError({ as: "global" }, ({ code, error, set, request }) => {
    // A guard that refuses while the body is parsed reaches here wrapped in Elysia's ParseError.
    const cause = code === "PARSE" ? (error as Error).cause : undefined;
    const appError = error instanceof AppError ? error : cause instanceof AppError ? cause : undefined;
    if (appError) {
      set.status = ERROR_STATUS[appError.code];
      const retry = retryAfterOf(appError);
      if (retry !== undefined) set.headers["retry-after"] ??= retry;
      if (appError.code === "dependency_down") set.headers["retry-after"] ??= String(DEPENDENCY_RETRY_AFTER_SECONDS);
      return errorBody(appError.code, appError.message, appError.extra);
    }
    const failure = dependencyFailure(error) ?? dependencyFailure(cause);
    if (failure) {
      set.status = 503;
      set.headers["retry-after"] = String(DEPENDENCY_RETRY_AFTER_SECONDS);
      log.warn({ requestId: meta.get(request)?.id, err: failure }, "dependency down");
      return errorBody("dependency_down", "a service Parley depends on is unavailable; retry later");
    }
    switch (code) {
      case "VALIDATION": {
        const refusal = bodyRefusal(request);
        if (refusal) {
          set.status = ERROR_STATUS[refusal.code];
          return errorBody(refusal.code, refusal.message);
        }
        set.status = 400;
        const { value, type } = error as { value?: unknown; type?: string };
        if (value === UNPARSABLE) return errorBody("invalid_json", "the request body could not be parsed");
        // A route that takes forms too: JSON sent as one fails its schema for its content type.
        if (type === "body" && jsonUnderAnotherType.has(request)) {
          set.status = ERROR_STATUS.unsupported_media_type;
          const declared = request.headers.get("content-type");
          const came = declared ? `came with content-type: ${declared}` : "came without a content-type";
          return errorBody(
            "unsupported_media_type",
            `the body is JSON but ${came}; send it with content-type: application/json`,
          );
        }
        // Named exactly even inside a union, where the schema's own report stops at the union.
        const unstorable = firstUnstorable(value, type === "body" ? "" : type);
        if (unstorable) return errorBody("bad_request", `${unstorable.path}: ${unstorable.reason}`);
        return errorBody("bad_request", describeValidation(error as never, request));
      }
      case "PARSE":
        set.status = 400;
        return errorBody("invalid_json", "the request body could not be parsed");
      case "NOT_FOUND": {
        const { pathname } = new URL(request.url);
        const served = methodsServed(pathname);
        if (served && !served.includes(request.method)) {
          set.status = ERROR_STATUS.method_not_allowed;
          set.headers.allow = served.join(", ");
          return errorBody(
            "method_not_allowed",
            `${request.method} is not served on ${pathname}; it answers ${served.join(", ")}`,
          );
        }
        set.status = 404;
        return errorBody("not_found", "no such route");
      }
      default: {
        const status =
          typeof (error as { status?: unknown }).status === "number" ? (error as { status: number }).status : 500;
        if (status >= 400 && status < 500) {
          set.status = status;
          return errorBody("bad_request", (error as Error).message || "bad request");
        }
        set.status = 500;
        log.error({ requestId: meta.get(request)?.id, err: loggableError(error) }, "unhandled error");
        return errorBody("internal", "internal error");
      }
    }
  })
  .onAfterResponse({ as: "global" }, ({ request, route, set }) => {
    const info = meta.get(request);
    if (!info) return;
    recordRequest(request.method, route || "unmatched", typeof set.status === "number" ? set.status : 200, info);
  });
