/**
 * Who is asking the console's API: the session cookie (a short JWT naming the session),
 * renewed while the console is in use, and the CSRF token every change must carry.
 */
import { jwt } from "@elysiajs/jwt";
import { Elysia } from "elysia";
import { config } from "../../core/config";
import { AppError } from "../../core/errors";
import { consoleSecret, csrfMatches, csrfToken, sessionViewer, type Viewer } from "./sessions";

const COOKIE = "parley_console";
export const API = "/console/api";

const viewerOf = new WeakMap<Request, Viewer>();

function cookieOf(header: string | undefined): string | undefined {
  return header
    ?.split(";")
    .map((part) => part.trim())
    .find((part) => part.startsWith(`${COOKIE}=`))
    ?.slice(COOKIE.length + 1);
}

export function sessionCookie(request: Request, value: string, maxAgeSeconds: number): string {
  const secure = config.http.publicUrl.startsWith("https:") || new URL(request.url).protocol === "https:";
  return (
    `${COOKIE}=${value}; Path=/console; HttpOnly; SameSite=Strict; ` +
    `Max-Age=${maxAgeSeconds}${secure ? "; Secure" : ""}`
  );
}

export function sessionBody(viewer: Viewer) {
  return {
    signed_in: true as const,
    kind: viewer.kind,
    name: viewer.name,
    account_id: viewer.kind === "account" ? viewer.accountId : null,
    csrf_token: csrfToken(viewer.sessionId),
  };
}

/** The session probe's answer: the page asks it on every load, so being signed out is an answer, not a failure. */
export const sessionProbe = (request: Request) => {
  const viewer = viewerOf.get(request);
  return viewer ? sessionBody(viewer) : { signed_in: false as const };
};

export const consoleAuth = new Elysia({ name: "parley.console.auth" })
  .use(jwt({ name: "consoleJwt", secret: consoleSecret(), exp: `${config.console.tokenTtlSeconds}s` }))
  // Before the body is parsed or validated: a request without a live session learns nothing else.
  .onRequest(async ({ consoleJwt, request, set }) => {
    // Every request passes here: the cheap test first, so the API's other routes pay nothing.
    if (!request.url.includes(`${API}/`)) return;
    const path = new URL(request.url).pathname;
    if (!path.startsWith(`${API}/`) || path === `${API}/login`) return;
    // The probe answers a missing, expired or revoked session itself (signed out); every other call is refused.
    const probe = path === `${API}/session`;
    const token = cookieOf(request.headers.get("cookie") ?? undefined);
    const claims = token ? await consoleJwt.verify(token) : false;
    if (!claims || typeof claims.sid !== "string") {
      if (probe) return;
      throw new AppError("unauthorized", "sign in to the console first");
    }
    const viewer = await sessionViewer(claims.sid).catch((error) => {
      if (probe && error instanceof AppError && error.code === "unauthorized") return undefined;
      throw error;
    });
    if (!viewer) return;
    if (request.method !== "GET" && !csrfMatches(viewer.sessionId, request.headers.get("x-csrf-token") ?? undefined)) {
      throw new AppError("forbidden", "the X-CSRF-Token header is missing or wrong; reload the console");
    }
    // Renewed once half its life is gone, so a console in use never signs out by itself.
    if (typeof claims.iat === "number" && Date.now() / 1000 - claims.iat > config.console.tokenTtlSeconds / 2) {
      set.headers["set-cookie"] = sessionCookie(
        request,
        await consoleJwt.sign({ sid: viewer.sessionId }),
        config.console.tokenTtlSeconds,
      );
    }
    viewerOf.set(request, viewer);
  })
  .resolve({ as: "scoped" }, ({ request }) => ({ viewer: viewerOf.get(request) as Viewer }));
