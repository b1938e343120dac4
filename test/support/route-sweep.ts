/**
 * The route sweep of the fault tests: one request to each route family, sent together to a
 * Parley started as an operator runs it, each answer reduced to its status, error code,
 * Retry-After and how long it took.
 */

export interface Answer {
  route: string;
  status: number;
  code?: string;
  retryAfter: string | null;
  ms: number;
}

export type Routes = Record<string, () => Promise<Response>>;

/** What the routes are sent to and with; read at each request, since a test learns it in beforeAll. */
export interface SweepTarget {
  base: string;
  apiKey: string;
  accountId: string;
  /** A messaging token of the account. */
  token: string;
}

export const DOMAIN = "conference.meet.example.com";

/** fetch on a new connection that gives up after `withinMs`: an outage must be reported, not waited out. */
export function freshFetch(withinMs: number) {
  return (url: string, init: RequestInit = {}) =>
    fetch(url, { ...init, keepalive: false, signal: AbortSignal.timeout(withinMs) });
}

let serial = 0;
/** A number no request of this run used before, for the names a request makes anew. */
export const nextSerial = () => ++serial;

/**
 * A JSON request sender and the routes every fault test sweeps: REST with an API key and with a
 * token, the public mapper, event_sync, usage and token generation.
 */
export function routeSweep(fresh: ReturnType<typeof freshFetch>, target: () => SweepTarget) {
  const json = (method: string, path: string, body: unknown, authorization: string) =>
    fresh(`${target().base}${path}`, {
      method,
      headers: { "content-type": "application/json", authorization },
      body: JSON.stringify(body),
    });
  const routes: Routes = {
    "generate-token": () =>
      json("POST", "/api/v1/misc/generate-token", { apiKey: target().apiKey, user: { id: "bob" } }, ""),
    "scheduler list": () =>
      fresh(`${target().base}/api/v1/scheduler/reservation`, { headers: { authorization: target().apiKey } }),
    "scheduler create": () =>
      json(
        "POST",
        "/api/v1/scheduler/reservation",
        { mail_owner: "o@example.com", name: `r${nextSerial()}`, duration: 30, start_time: "2031-01-01T10:00" },
        target().apiKey,
      ),
    "public mapper": () =>
      fresh(
        `${target().base}/api/v1/conference-mapper/${target().accountId}` +
          `/conferenceMapper?conference=room${nextSerial()}@${DOMAIN}`,
      ),
    mapper: () =>
      fresh(`${target().base}/api/v1/conference-mapper/conferenceMapper?conference=room${nextSerial()}@${DOMAIN}`, {
        headers: { authorization: target().apiKey },
      }),
    event_sync: () =>
      json(
        "POST",
        "/api/v1/events/occupant/joined",
        {
          event_name: "muc-occupant-joined",
          room_name: "load",
          room_jid: `load@${DOMAIN}`,
          is_breakout: false,
          active_occupants_count: 1,
          occupant: { occupant_jid: `load@${DOMAIN}/u${nextSerial()}`, joined_at: Math.floor(Date.now() / 1000) },
        },
        `Bearer ${target().apiKey}`,
      ),
    usage: () => json("POST", "/api/v1/pricing/cdr", {}, `Bearer ${target().apiKey}`),
    "messaging rooms": () =>
      fresh(`${target().base}/api/v1/messaging/rooms`, { headers: { authorization: `Bearer ${target().token}` } }),
  };
  return { json, routes };
}

/** Sends every route at once; a request that got no answer is status 0 with the error's name as code. */
export async function ask(routes: Routes): Promise<Answer[]> {
  return Promise.all(
    Object.entries(routes).map(async ([route, send]) => {
      const started = Date.now();
      const response = await send().catch((error: Error) => error);
      const ms = Date.now() - started;
      if (response instanceof Error) return { route, status: 0, code: response.name, retryAfter: null, ms };
      const body = (await response
        .text()
        .then((text) => JSON.parse(text))
        .catch(() => ({}))) as { error?: { code?: string } };
      return {
        route,
        status: response.status,
        code: body.error?.code,
        retryAfter: response.headers.get("retry-after"),
        ms,
      };
    }),
  );
}
