/**
 * Calls to the console's API, typed by the console's own routes: a call names a route as it is
 * declared there (`/accounts/:account/keys`), and its query, body and answer are the types
 * Elysia infers for that route — the TypeBox models and the services' return types. A field
 * renamed in a model fails `tsc` on the page that reads it. Type-only imports: nothing of the
 * server reaches the browser's bundle. The session cookie goes along by itself; the CSRF token
 * is added to every change.
 */
import type { consoleController } from "../routes";

type Routes = (typeof consoleController)["~Routes"]["console"]["api"];
type Method = "get" | "post" | "patch" | "delete";

/** Every route path under /console/api with a handler for the method, e.g. "/chat/messages". */
type PathsOf<Node, M extends Method, Prefix extends string = ""> = {
  // A handler is the node with a response; a segment may itself be called "delete" (/chat/delete).
  [Key in keyof Node & string]: Node[Key] extends { response: unknown }
    ? Key extends M
      ? Prefix
      : never
    : PathsOf<Node[Key], M, `${Prefix}/${Key}`>;
}[keyof Node & string];

type RouteAt<Node, Path extends string> = Path extends `/${infer Head}/${infer Rest}`
  ? Head extends keyof Node
    ? RouteAt<Node[Head], `/${Rest}`>
    : never
  : Path extends `/${infer Last}`
    ? Last extends keyof Node
      ? Node[Last]
      : never
    : never;

type Schema<M extends Method, P extends string> =
  RouteAt<Routes, P> extends infer Route ? (M extends keyof Route ? Route[M] : never) : never;

/** A value as JSON carries it: dates become their ISO strings. */
export type Wire<T> = T extends Date
  ? string
  : T extends ReadonlyArray<infer Item>
    ? Wire<Item>[]
    : T extends object
      ? { [Key in keyof T]: Wire<T[Key]> }
      : T;

/** The answer of a route, as the browser receives it. */
export type Answer<M extends Method, P extends PathsOf<Routes, M>> = Wire<
  Schema<M, P> extends { response: { 200: infer Body } } ? Body : never
>;

/**
 * What a call gives beside its path: the route's params, query and body, each required only where the route needs it.
 */
type Parts<S> = (S extends { params: infer Params }
  ? keyof Params extends never
    ? { params?: never }
    : { params: Params }
  : { params?: never }) &
  (S extends { query: infer Query }
    ? unknown extends Query
      ? { query?: never }
      : { query?: Query }
    : { query?: never }) &
  (S extends { body: infer Body } ? (unknown extends Body ? { body?: never } : { body: Body }) : { body?: never });

export type Session = Extract<Answer<"get", "/session">, { signed_in: true }>;

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

let csrf = "";
export function useSession(session: Session): void {
  csrf = session.csrf_token;
}

export async function api<M extends Method, P extends PathsOf<Routes, M>>(
  method: M,
  path: P,
  parts?: Parts<Schema<M, P>>,
): Promise<Answer<M, P>> {
  const {
    params,
    query: search,
    body,
  } = (parts ?? {}) as { params?: Record<string, unknown>; query?: Record<string, unknown>; body?: unknown };
  const filled = path.replace(/:(\w+)/g, (_whole, name: string) => encodeURIComponent(String(params?.[name])));
  const headers: Record<string, string> = {};
  if (body !== undefined) headers["content-type"] = "application/json";
  if (method !== "get") headers["x-csrf-token"] = csrf;
  const response = await fetch(`/console/api${filled}${query(search ?? {})}`, {
    method: method.toUpperCase(),
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  const text = await response.text();
  const parsed = text ? JSON.parse(text) : null;
  if (!response.ok)
    throw new ApiError(response.status, parsed?.error?.code ?? "error", parsed?.error?.message ?? response.statusText);
  return parsed;
}

export function query(params: Record<string, unknown>): string {
  const entries = Object.entries(params).filter(
    (entry): entry is [string, string | number | boolean] =>
      entry[1] !== undefined && entry[1] !== null && entry[1] !== "",
  );
  return entries.length === 0 ? "" : `?${new URLSearchParams(entries.map(([name, value]) => [name, String(value)]))}`;
}
