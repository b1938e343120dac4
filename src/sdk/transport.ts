/**
 * How the client reaches Parley: its options, the typed openapi-fetch client with the
 * credential and retries, and the two ways an answer becomes data or a ParleyError (`ok` for
 * the typed routes, `raw` for streams and text). Apart from the groups of methods (client-*.ts),
 * which all go through it.
 */
import createClient, { type Client } from "openapi-fetch";
import { errorFromAnswer, ParleyError } from "./errors.js";
import type { paths } from "./generated/openapi.js";
import { type RetryOptions, retrying } from "./retry.js";

export interface ParleyOptions {
  /** Where Parley answers, e.g. `https://parley.example.com` (its PUBLIC_URL). */
  baseUrl: string;
  /** The account's API key: account routes (scheduler, events, webhooks, usage, streaming) and token minting. */
  apiKey?: string;
  /** A token from `generateToken`: the chat routes and uploads act as its user. */
  token?: string;
  /** An operator token (`pop_…`): the admin routes. */
  operatorToken?: string;
  /** Another fetch, e.g. one bound to a Unix socket; the global fetch by default. */
  fetch?: (request: Request) => Promise<Response>;
  /** Headers sent with every request (User-Agent, tracing). */
  headers?: Record<string, string>;
  retry?: RetryOptions;
}

interface Result<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

/** Refuses a missing or unusable baseUrl when the client is made, not at its first request. */
function checkBaseUrl(baseUrl: unknown): void {
  const usable = typeof baseUrl === "string" && URL.canParse(baseUrl) && /^https?:$/.test(new URL(baseUrl).protocol);
  if (!usable)
    throw new TypeError(
      "new Parley({ baseUrl }) needs baseUrl, the http(s) address where Parley answers (its PUBLIC_URL, " +
        `e.g. http://localhost:3000 or https://parley.example.com); got ${JSON.stringify(baseUrl) ?? "undefined"}`,
    );
}

/** An error's message with those of its causes: Node's fetch says only "fetch failed", its cause says why. */
function causes(error: unknown): string {
  const parts: string[] = [];
  for (let current = error, depth = 0; current instanceof Error && depth < 4; current = current.cause, depth++) {
    const code = (current as { code?: unknown }).code;
    parts.push(
      typeof code === "string" && !current.message.includes(code) ? `${current.message} (${code})` : current.message,
    );
  }
  return parts.length > 0 ? parts.join(": ") : String(error);
}

/** A request that got no answer: its method and URL, and why, from the fetch error and its causes. */
function noAnswer(request: Request, error: unknown): ParleyError {
  return new ParleyError(
    "network_error",
    `no answer from Parley to ${request.method} ${request.url}: ${causes(error)}`,
    0,
  );
}

export class Transport {
  /** The typed client of every route. */
  readonly api: Client<paths>;
  private readonly send: (request: Request) => Promise<Response>;
  /** One attempt, without retries: for the event stream, which counts its refusals itself. */
  readonly sendOnce: (request: Request) => Promise<Response>;
  private readonly credential: string | undefined;

  constructor(readonly options: ParleyOptions) {
    checkBaseUrl(options?.baseUrl);
    const fetchOnce = options.fetch ?? ((request: Request) => globalThis.fetch(request));
    const base = async (request: Request) => {
      try {
        return await fetchOnce(request);
      } catch (error) {
        // The caller's own abort is theirs to handle as it is.
        if (request.signal.aborted) throw error;
        throw noAnswer(request, error);
      }
    };
    this.sendOnce = base;
    this.send = retrying(base, options.retry);
    this.credential = options.operatorToken ?? options.token ?? options.apiKey;
    this.api = createClient<paths>({
      baseUrl: options.baseUrl.replace(/\/+$/, ""),
      fetch: this.send,
      headers: { ...options.headers, ...(this.credential ? { authorization: `Bearer ${this.credential}` } : {}) },
    });
  }

  /** The answer's data, or the ParleyError it describes. */
  readonly ok = async <T>(pending: Promise<Result<T>>): Promise<T> => {
    let result: Result<T>;
    try {
      result = await pending;
    } catch (error) {
      if (error instanceof ParleyError) throw error;
      throw new ParleyError("network_error", `no answer from Parley at ${this.options.baseUrl}: ${causes(error)}`, 0);
    }
    if (!result.response.ok) throw errorFromAnswer(result.response.status, result.error);
    return result.data as T;
  };

  /** A request outside openapi-fetch (streams, text), through the same retries and errors. */
  readonly raw = async (
    path: string,
    init: RequestInit & { query?: Record<string, string | undefined> } = {},
    send = this.send,
  ): Promise<Response> => {
    const url = new URL(this.options.baseUrl.replace(/\/+$/, "") + path);
    for (const [name, value] of Object.entries(init.query ?? {}))
      if (value !== undefined) url.searchParams.set(name, value);
    const headers = new Headers(this.options.headers);
    if (this.credential) headers.set("authorization", `Bearer ${this.credential}`);
    new Headers(init.headers).forEach((value, name) => {
      headers.set(name, value);
    });
    let answer: Response;
    try {
      answer = await send(new Request(url, { ...init, headers }));
    } catch (error) {
      if (error instanceof ParleyError) throw error;
      throw new ParleyError("network_error", `no answer from Parley at ${url}: ${causes(error)}`, 0);
    }
    if (answer.ok) return answer;
    const text = await answer.text();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {}
    throw errorFromAnswer(answer.status, body);
  };
}
