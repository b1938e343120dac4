/**
 * What every request goes through: a request id, the one error shape, a structured log
 * line and the route's metrics. Credentials never reach the log: only method, route,
 * status and timing are written, never headers, bodies or query strings.
 */
import { randomUUID } from "node:crypto";
import { Elysia } from "elysia";
import { config } from "../config";
import { AppError, errorBody } from "./errors";
import { log } from "./log";
import { observeRequest } from "./metrics";

interface RequestMeta {
  id: string;
  startedAt: number;
}

const meta = new WeakMap<Request, RequestMeta>();
const INCOMING_ID = /^[\w.:-]{1,128}$/;

/** The first field path and reason of a schema failure, e.g. `body.user.email: Expected string to match 'email' format`. */
function describeValidation(error: { all?: Array<{ path?: string; message?: string; summary?: string }>; type?: string }) {
  const first = error.all?.[0];
  if (!first) return "the request does not match the schema";
  const path = (first.path ?? "").replace(/^\//, "").replaceAll("/", ".");
  const where = [error.type === "body" ? "" : error.type, path].filter(Boolean).join(".");
  return `${where || error.type || "request"}: ${first.summary ?? first.message ?? "invalid"}`;
}

export const pipeline = new Elysia({ name: "parley.pipeline" })
  .onRequest(({ request, set }) => {
    const incoming = request.headers.get("x-request-id");
    const id = incoming && INCOMING_ID.test(incoming) ? incoming : randomUUID();
    meta.set(request, { id, startedAt: performance.now() });
    set.headers["x-request-id"] = id;
    if (Number(request.headers.get("content-length") ?? 0) > config.http.maxBodyBytes) {
      throw new AppError("payload_too_large", `the body may be at most ${config.http.maxBodyBytes} bytes`);
    }
  })
  .onError({ as: "global" }, ({ code, error, set, request }) => {
    if (error instanceof AppError) {
      set.status = error.status;
      return errorBody(error.code, error.message, error.extra);
    }
    switch (code) {
      case "VALIDATION":
        set.status = 400;
        return errorBody("bad_request", describeValidation(error as never));
      case "PARSE":
        set.status = 400;
        return errorBody("invalid_json", "the request body could not be parsed");
      case "NOT_FOUND":
        set.status = 404;
        return errorBody("not_found", "no such route");
      default: {
        const status = typeof (error as { status?: unknown }).status === "number" ? (error as { status: number }).status : 500;
        if (status >= 400 && status < 500) {
          set.status = status;
          return errorBody("bad_request", (error as Error).message || "bad request");
        }
        set.status = 500;
        log.error({ requestId: meta.get(request)?.id, err: { message: (error as Error).message, stack: (error as Error).stack } }, "unhandled error");
        return errorBody("internal", "internal error");
      }
    }
  })
  .onAfterResponse({ as: "global" }, ({ request, route, set }) => {
    const info = meta.get(request);
    if (!info) return;
    const seconds = (performance.now() - info.startedAt) / 1000;
    const status = typeof set.status === "number" ? set.status : 200;
    const routeName = route || "unmatched";
    observeRequest(request.method, routeName, status, seconds);
    log.info({ requestId: info.id, method: request.method, route: routeName, status, ms: Math.round(seconds * 1e4) / 10 }, "request");
  });
