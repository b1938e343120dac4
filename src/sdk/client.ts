/**
 * `new Parley({ baseUrl, apiKey })`: a thin layer over the generated types and openapi-fetch,
 * one group of methods per route family. Every answer other than 2xx becomes a ParleyError
 * with the API's `error.code`; 429 and 503 are tried again after their Retry-After.
 */
import createClient, { type Client } from "openapi-fetch";
import { errorFromAnswer, ParleyError } from "./errors.js";
import type { paths } from "./generated/openapi.js";
import { type RetryOptions, retryDelayMs, retrying } from "./retry.js";
import { serverSentEvents } from "./sse.js";
import type { ParleyEvent, ParleyEventType } from "./webhooks.js";

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

type Method = "get" | "post" | "put" | "patch" | "delete";
type Operation<P extends keyof paths, M extends Method> = paths[P][M & keyof paths[P]];
/** The JSON body a route takes. */
export type RequestBody<P extends keyof paths, M extends Method> =
  Operation<P, M> extends { requestBody?: { content: { "application/json": infer B } } } ? B : never;
/** The query parameters a route takes. */
export type QueryOf<P extends keyof paths, M extends Method> =
  Operation<P, M> extends { parameters: { query?: infer Q } } ? NonNullable<Q> : never;
/** The JSON a route answers with on success. */
export type Answer<P extends keyof paths, M extends Method> =
  Operation<P, M> extends { responses: { 200: { content: { "application/json": infer A } } } }
    ? A
    : Operation<P, M> extends { responses: { 201: { content: { "application/json": infer A } } } }
      ? A
      : unknown;

export type ChatMessage = Extract<
  Answer<"/api/v1/messaging/rooms/{channel_id}/messages", "get">,
  { messages: unknown }
>["messages"][number];
export type AuditEntry = Answer<"/api/v1/admin/audit", "get">["entries"][number];
export type WebhookDelivery = Answer<"/api/v1/webhooks/{id}/deliveries", "get">["deliveries"][number];

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });

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

export class Parley {
  /** The typed client of every route, for what the methods below do not cover: `parley.api.GET("/healthz")`. */
  readonly api: Client<paths>;
  private readonly send: (request: Request) => Promise<Response>;
  /** One attempt, without retries: for the event stream, which counts its refusals itself. */
  private readonly sendOnce: (request: Request) => Promise<Response>;
  private readonly credential: string | undefined;

  constructor(private readonly options: ParleyOptions) {
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

  /** The same Parley with another credential, e.g. a user's token for the chat routes. */
  with(credentials: Pick<ParleyOptions, "apiKey" | "token" | "operatorToken">): Parley {
    return new Parley({
      ...this.options,
      apiKey: undefined,
      token: undefined,
      operatorToken: undefined,
      ...credentials,
    });
  }

  /** The answer's data, or the ParleyError it describes. */
  private async ok<T>(pending: Promise<Result<T>>): Promise<T> {
    let result: Result<T>;
    try {
      result = await pending;
    } catch (error) {
      if (error instanceof ParleyError) throw error;
      throw new ParleyError("network_error", `no answer from Parley at ${this.options.baseUrl}: ${causes(error)}`, 0);
    }
    if (!result.response.ok) throw errorFromAnswer(result.response.status, result.error);
    return result.data as T;
  }

  /** A request outside openapi-fetch (streams, text), through the same retries and errors. */
  private async raw(
    path: string,
    init: RequestInit & { query?: Record<string, string | undefined> } = {},
    send = this.send,
  ): Promise<Response> {
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
  }

  /** Whether Parley's database answers (GET /readyz). */
  async ready(): Promise<boolean> {
    return (await this.api.GET("/readyz")).response.ok;
  }

  /**
   * A token for a user of the account (POST /api/v1/misc/generate-token): `scope` `messaging`
   * (chat), `media` (Jitsi, optionally for one `room`), `parley` (account routes), or empty for all.
   */
  async generateToken(
    claims: Omit<RequestBody<"/api/v1/misc/generate-token", "post">, "apiKey"> = {},
  ): Promise<string> {
    const answer = await this.ok(this.api.POST("/api/v1/misc/generate-token", { body: claims }));
    return answer.token;
  }

  /** Conferences and reservations (docs/scheduling.md); account API key. */
  readonly scheduler = {
    listConferences: () => this.ok(this.api.GET("/api/v1/scheduler/conference")),
    createConference: (body: RequestBody<"/api/v1/scheduler/conference", "post">) =>
      this.ok(this.api.POST("/api/v1/scheduler/conference", { body })),
    getConference: (id: string | number) =>
      this.ok(this.api.GET("/api/v1/scheduler/conference/{id}", { params: { path: { id: String(id) } } })),
    getConferenceByRoom: (name: string) =>
      this.ok(this.api.GET("/api/v1/scheduler/conference/room/{name}", { params: { path: { name } } })),
    deleteConference: (id: string | number) =>
      this.ok(this.api.DELETE("/api/v1/scheduler/conference/{id}", { params: { path: { id: String(id) } } })),
    listReservations: () => this.ok(this.api.GET("/api/v1/scheduler/reservation")),
    createReservation: (body: RequestBody<"/api/v1/scheduler/reservation", "post">) =>
      this.ok(this.api.POST("/api/v1/scheduler/reservation", { body })),
    getReservation: (id: string | number) =>
      this.ok(this.api.GET("/api/v1/scheduler/reservation/{id}", { params: { path: { id: String(id) } } })),
    getReservationByRoom: (name: string) =>
      this.ok(this.api.GET("/api/v1/scheduler/reservation/room/{name}", { params: { path: { name } } })),
    deleteReservation: (id: string | number) =>
      this.ok(this.api.DELETE("/api/v1/scheduler/reservation/{id}", { params: { path: { id: String(id) } } })),
  };

  /** Jitsi's conference mapper and dial-in numbers (docs/mapper.md). */
  readonly mapper = {
    conference: (query: QueryOf<"/api/v1/conference-mapper/conferenceMapper", "get">) =>
      this.ok(this.api.GET("/api/v1/conference-mapper/conferenceMapper", { params: { query } })),
    phoneNumbers: (query: QueryOf<"/api/v1/conference-mapper/phoneNumberList", "get"> = {}) =>
      this.ok(this.api.GET("/api/v1/conference-mapper/phoneNumberList", { params: { query } })),
    /**
     * The same under the account id with no credential, open to any
     * origin: what a browser (jitsi-meet's dial-in page) calls.
     */
    publicConference: (
      accountId: string,
      query: QueryOf<"/api/v1/conference-mapper/{accountId}/conferenceMapper", "get">,
    ) =>
      this.ok(
        this.api.GET("/api/v1/conference-mapper/{accountId}/conferenceMapper", {
          params: { path: { accountId }, query },
        }),
      ),
    publicPhoneNumbers: (
      accountId: string,
      query: QueryOf<"/api/v1/conference-mapper/{accountId}/phoneNumberList", "get"> = {},
    ) =>
      this.ok(
        this.api.GET("/api/v1/conference-mapper/{accountId}/phoneNumberList", {
          params: { path: { accountId }, query },
        }),
      ),
  };

  /** Live streams and recordings of a room (docs/streaming.md); account API key. */
  readonly streaming = {
    start: (body: RequestBody<"/terraform/v1/hooks/srs/startRecording", "post">) =>
      this.ok(this.api.POST("/terraform/v1/hooks/srs/startRecording", { body })),
    stop: (roomName: string) =>
      this.ok(this.api.POST("/terraform/v1/hooks/srs/stopRecording", { body: { room_name: roomName } })),
    viewers: (streamName: string) =>
      this.ok(
        this.api.GET("/terraform/v1/hooks/srs/live/viewers/count/{stream_name}", {
          params: { path: { stream_name: streamName } },
        }),
      ),
  };

  /** Chat rooms and messages (docs/chat.md), as the user of the client's token (`parley.with({ token })`). */
  readonly chat = {
    rooms: () => this.ok(this.api.GET("/api/v1/messaging/rooms")),
    createRoom: (body: RequestBody<"/api/v1/messaging/rooms/create", "post">) =>
      this.ok(this.api.POST("/api/v1/messaging/rooms/create", { body })),
    room: (channelId: string) =>
      this.ok(this.api.GET("/api/v1/messaging/rooms/{channel_id}", { params: { path: { channel_id: channelId } } })),
    /** One page of the room's messages, newest first. */
    messages: (channelId: string, query: QueryOf<"/api/v1/messaging/rooms/{channel_id}/messages", "get"> = {}) =>
      this.ok(
        this.api.GET("/api/v1/messaging/rooms/{channel_id}/messages", {
          params: { path: { channel_id: channelId }, query },
        }),
      ),
    /** Every message of the room, newest first, a page of `pageSize` at a time. */
    allMessages: (channelId: string, pageSize = 100): AsyncGenerator<ChatMessage> =>
      byOffset(pageSize, async (size, offset) => {
        const page = await this.chat.messages(channelId, { size, offset });
        return "messages" in page ? page.messages : [];
      }),
    message: (channelId: string, messageId: number) =>
      this.ok(
        this.api.GET("/api/v1/messaging/rooms/{channel_id}/messages/{message_id}", {
          params: { path: { channel_id: channelId, message_id: messageId } },
        }),
      ),
    editMessage: (channelId: string, messageId: number, content: string) =>
      this.ok(
        this.api.PUT("/api/v1/messaging/rooms/{channel_id}/messages/{message_id}", {
          params: { path: { channel_id: channelId, message_id: messageId } },
          body: { content },
        }),
      ),
    deleteMessages: (channelId: string, body: RequestBody<"/api/v1/messaging/rooms/{channel_id}/messages", "delete">) =>
      this.ok(
        this.api.DELETE("/api/v1/messaging/rooms/{channel_id}/messages", {
          params: { path: { channel_id: channelId } },
          body,
        }),
      ),
    searchMessages: (
      channelId: string,
      query: QueryOf<"/api/v1/messaging/rooms/{channel_id}/messages/search", "get">,
    ) =>
      this.ok(
        this.api.GET("/api/v1/messaging/rooms/{channel_id}/messages/search", {
          params: { path: { channel_id: channelId }, query },
        }),
      ),
    replies: (
      channelId: string,
      messageId: number,
      query: QueryOf<"/api/v1/messaging/rooms/{channel_id}/messages/{message_id}/messages_replies", "get"> = {},
    ) =>
      this.ok(
        this.api.GET("/api/v1/messaging/rooms/{channel_id}/messages/{message_id}/messages_replies", {
          params: { path: { channel_id: channelId, message_id: messageId }, query },
        }),
      ),
    vote: (channelId: string, messageId: number, optionId: number) =>
      this.ok(
        this.api.POST("/api/v1/messaging/rooms/{channel_id}/messages/{message_id}/poll/{poll_option_id}", {
          params: { path: { channel_id: channelId, message_id: messageId, poll_option_id: optionId } },
        }),
      ),
    votes: (channelId: string, messageId: number) =>
      this.ok(
        this.api.GET("/api/v1/messaging/rooms/{channel_id}/messages/{message_id}/poll/votes", {
          params: { path: { channel_id: channelId, message_id: messageId } },
        }),
      ),
    addUser: (channelId: string, userId: string) =>
      this.ok(
        this.api.POST("/api/v1/messaging/rooms/{channel_id}/users/{user_id}", {
          params: { path: { channel_id: channelId, user_id: userId } },
        }),
      ),
    removeUser: (channelId: string, userId: string) =>
      this.ok(
        this.api.DELETE("/api/v1/messaging/rooms/{channel_id}/users/{user_id}", {
          params: { path: { channel_id: channelId, user_id: userId } },
        }),
      ),
    roomUsers: (channelId: string) =>
      this.ok(this.api.GET("/api/v1/rooms/{channel_id}/users", { params: { path: { channel_id: channelId } } })),
    searchUsers: (query: QueryOf<"/api/v1/messaging/users/search", "get">) =>
      this.ok(this.api.GET("/api/v1/messaging/users/search", { params: { query } })),
  };

  /** Files for chat, straight into object storage (docs/chat.md), as the token's user. */
  readonly uploads = {
    presign: (body: RequestBody<"/api/v1/misc/get-presigned", "post">) =>
      this.ok(this.api.POST("/api/v1/misc/get-presigned", { body })),
    /**
     * Presigns `fileName` for the bytes' size and PUTs them there with the content
     * type the signature names; resolves with the object's key.
     */
    upload: async (fileName: string, fileType: string, bytes: Blob | ArrayBuffer | Uint8Array): Promise<string> => {
      const fileSize = bytes instanceof Blob ? bytes.size : bytes.byteLength;
      const signed = await this.uploads.presign({ fileName, fileType, fileSize });
      // The bytes go to object storage, not to Parley: the global fetch, whatever reaches Parley.
      const put = await globalThis.fetch(signed.presigned_url, {
        method: "PUT",
        body: bytes as BodyInit,
        headers: { "content-type": signed.content_type },
      });
      if (!put.ok)
        throw new ParleyError(
          "upload_failed",
          `object storage answered ${put.status}: ${(await put.text()).slice(0, 200)}`,
          put.status,
        );
      return signed.key;
    },
  };

  /** The usage report (docs/usage.md): the account API key, or a `parley`-scope token. */
  readonly usage = {
    report: (body: RequestBody<"/api/v1/pricing/cdr", "post"> = {}) =>
      this.ok(this.api.POST("/api/v1/pricing/cdr", { body })),
    /** The same report as CSV text. */
    reportCsv: async (body: RequestBody<"/api/v1/pricing/cdr", "post"> = {}) =>
      (
        await this.raw("/api/v1/pricing/cdr", {
          method: "POST",
          body: JSON.stringify(body),
          headers: { "content-type": "application/json", accept: "text/csv" },
        })
      ).text(),
  };

  /** The account's event log and event stream (docs/webhooks.md); account API key. */
  readonly events = {
    /** One page of the log: `{ events, next_after }`. */
    list: (query: QueryOf<"/api/v1/events", "get"> = {}) =>
      this.ok(this.api.GET("/api/v1/events", { params: { query } })),
    /** Every kept event after `after` (0: the oldest kept), page by page, ending when it has caught up. */
    all: async function* (
      this: Parley,
      options: { after?: number; types?: ParleyEventType[]; pageSize?: number } = {},
    ): AsyncGenerator<ParleyEvent> {
      let after = options.after ?? 0;
      for (;;) {
        const page = await this.events.list({ after, limit: options.pageSize ?? 100, types: options.types?.join(",") });
        yield* page.events;
        const next = page.next_after;
        if (page.events.length === 0 || next === after) return;
        after = next;
      }
    }.bind(this),
    /**
     * The live stream (Server-Sent Events), from `after` (a sequence; absent: from now on).
     * It reconnects by itself after a dropped connection, sending Last-Event-ID, so nothing is
     * missed or repeated; it ends when `signal` aborts or the loop breaks. Refused with 429
     * or 503 (a cap on open streams reached, a dependency down), it waits what Retry-After
     * says and connects again, as many times in a row as `retry.retries` allows, then throws.
     */
    stream: async function* (
      this: Parley,
      options: { after?: number; types?: ParleyEventType[]; signal?: AbortSignal } = {},
    ): AsyncGenerator<ParleyEvent> {
      let lastId = options.after === undefined ? undefined : String(options.after);
      let delayMs = 1_000;
      // Refusals in a row; a stream that opened starts the count again.
      let refusals = 0;
      while (!options.signal?.aborted) {
        // Set by the attempt: how long its 429 or 503 asks to wait, undefined when it may not be tried again.
        const refused: { waitMs?: number } = {};
        try {
          const answer = await this.raw(
            "/api/v1/events/stream",
            {
              query: { types: options.types?.join(",") },
              headers: { accept: "text/event-stream", ...(lastId === undefined ? {} : { "last-event-id": lastId }) },
              signal: options.signal,
            },
            async (request) => {
              const answer = await this.sendOnce(request);
              refused.waitMs = retryDelayMs(answer, refusals, this.options.retry);
              return answer;
            },
          );
          refusals = 0;
          if (!answer.body)
            throw new ParleyError("network_error", "the event stream came without a body", answer.status);
          for await (const message of serverSentEvents(answer.body, (ms) => {
            delayMs = ms;
          })) {
            if (message.id !== undefined) lastId = message.id;
            if (message.data !== "") yield JSON.parse(message.data) as ParleyEvent;
          }
        } catch (error) {
          if (options.signal?.aborted) return;
          if (refused.waitMs !== undefined) {
            refusals++;
            await sleep(refused.waitMs, options.signal);
            continue;
          }
          // Parley refused (a bad key, a bad filter; a 429 or 503 once its retries are used up):
          // trying again would be refused again.
          if (error instanceof ParleyError && ((error.status >= 400 && error.status < 500) || error.status === 503))
            throw error;
        }
        await sleep(delayMs, options.signal);
      }
    }.bind(this),
  };

  /** Webhook endpoints and their deliveries (docs/webhooks.md); account API key. */
  readonly webhooks = {
    /** A new endpoint and its signing secret (`whsec_…`), shown this once. */
    create: (body: RequestBody<"/api/v1/webhooks", "post">) => this.ok(this.api.POST("/api/v1/webhooks", { body })),
    list: () => this.ok(this.api.GET("/api/v1/webhooks")),
    get: (id: string) => this.ok(this.api.GET("/api/v1/webhooks/{id}", { params: { path: { id } } })),
    update: (id: string, body: RequestBody<"/api/v1/webhooks/{id}", "patch">) =>
      this.ok(this.api.PATCH("/api/v1/webhooks/{id}", { params: { path: { id } }, body })),
    remove: (id: string) => this.ok(this.api.DELETE("/api/v1/webhooks/{id}", { params: { path: { id } } })),
    rotateSecret: (id: string) =>
      this.ok(this.api.POST("/api/v1/webhooks/{id}/rotate-secret", { params: { path: { id } } })),
    /** One page of the endpoint's deliveries, newest first. */
    deliveries: (id: string, query: QueryOf<"/api/v1/webhooks/{id}/deliveries", "get"> = {}) =>
      this.ok(this.api.GET("/api/v1/webhooks/{id}/deliveries", { params: { path: { id }, query } })),
    /** Every kept delivery of the endpoint, newest first. */
    allDeliveries: async function* (this: Parley, id: string, pageSize = 100): AsyncGenerator<WebhookDelivery> {
      let before: QueryOf<"/api/v1/webhooks/{id}/deliveries", "get">["before"];
      for (;;) {
        const { deliveries } = await this.webhooks.deliveries(id, { limit: pageSize, before });
        yield* deliveries;
        if (deliveries.length < pageSize) return;
        before = deliveries[deliveries.length - 1]!.id;
      }
    }.bind(this),
    retryDelivery: (id: string, delivery: string | number) =>
      this.ok(
        this.api.POST("/api/v1/webhooks/{id}/deliveries/{delivery}/retry", {
          params: { path: { id, delivery: String(delivery) } },
        }),
      ),
    replay: (id: string, body: RequestBody<"/api/v1/webhooks/{id}/replay", "post">) =>
      this.ok(this.api.POST("/api/v1/webhooks/{id}/replay", { params: { path: { id } }, body })),
  };

  /**
   * Parley's operators' routes (/api/v1/admin), for an operator token (`operatorToken`; a
   * `read` token may only list) or the local socket. Each change is written to the audit log.
   */
  readonly admin = {
    listAccounts: () => this.ok(this.api.GET("/api/v1/admin/accounts")),
    /** A new account and its first API key, shown this once. */
    createAccount: (body: RequestBody<"/api/v1/admin/accounts", "post">) =>
      this.ok(this.api.POST("/api/v1/admin/accounts", { body })),
    createKey: (accountId: string, body: RequestBody<"/api/v1/admin/accounts/{id}/keys", "post"> = {}) =>
      this.ok(this.api.POST("/api/v1/admin/accounts/{id}/keys", { params: { path: { id: accountId } }, body })),
    revokeKey: (keyId: number) =>
      this.ok(this.api.DELETE("/api/v1/admin/keys/{keyId}", { params: { path: { keyId } } })),
    rotateSigningKey: (accountId: string, body: RequestBody<"/api/v1/admin/accounts/{id}/signing-keys", "post"> = {}) =>
      this.ok(this.api.POST("/api/v1/admin/accounts/{id}/signing-keys", { params: { path: { id: accountId } }, body })),
    revokeSigningKey: (kid: string) =>
      this.ok(this.api.DELETE("/api/v1/admin/signing-keys/{kid}", { params: { path: { kid } } })),
    setJitsiDomain: (accountId: string, domain: string) =>
      this.ok(
        this.api.PUT("/api/v1/admin/accounts/{id}/jitsi-domain", {
          params: { path: { id: accountId } },
          body: { domain },
        }),
      ),
    listNumbers: (accountId: string) =>
      this.ok(this.api.GET("/api/v1/admin/accounts/{id}/numbers", { params: { path: { id: accountId } } })),
    addNumber: (accountId: string, body: RequestBody<"/api/v1/admin/accounts/{id}/numbers", "post">) =>
      this.ok(this.api.POST("/api/v1/admin/accounts/{id}/numbers", { params: { path: { id: accountId } }, body })),
    setDefaultNumber: (numberId: number) =>
      this.ok(this.api.POST("/api/v1/admin/numbers/{id}/default", { params: { path: { id: numberId } } })),
    removeNumber: (numberId: number) =>
      this.ok(this.api.DELETE("/api/v1/admin/numbers/{id}", { params: { path: { id: numberId } } })),
    limits: (accountId: string) =>
      this.ok(this.api.GET("/api/v1/admin/accounts/{id}/limits", { params: { path: { id: accountId } } })),
    /** One limit of the account (docs/limits.md): a whole number, or "default" to drop the account's own value. */
    setLimit: (accountId: string, name: string, value: number | "default") =>
      this.ok(
        this.api.PUT("/api/v1/admin/accounts/{id}/limits/{name}", {
          params: { path: { id: accountId, name } },
          body: { value },
        }),
      ),
    listOperators: () => this.ok(this.api.GET("/api/v1/admin/operators")),
    createOperator: (body: RequestBody<"/api/v1/admin/operators", "post">) =>
      this.ok(this.api.POST("/api/v1/admin/operators", { body })),
    listOperatorTokens: () => this.ok(this.api.GET("/api/v1/admin/operator-tokens")),
    /** A new operator token (`pop_…`), shown this once. */
    createOperatorToken: (body: RequestBody<"/api/v1/admin/operator-tokens", "post">) =>
      this.ok(this.api.POST("/api/v1/admin/operator-tokens", { body })),
    revokeOperatorToken: (id: number) =>
      this.ok(this.api.DELETE("/api/v1/admin/operator-tokens/{id}", { params: { path: { id } } })),
    listWebhooks: (accountId: string) =>
      this.ok(this.api.GET("/api/v1/admin/accounts/{id}/webhooks", { params: { path: { id: accountId } } })),
    addWebhook: (accountId: string, body: RequestBody<"/api/v1/admin/accounts/{id}/webhooks", "post">) =>
      this.ok(this.api.POST("/api/v1/admin/accounts/{id}/webhooks", { params: { path: { id: accountId } }, body })),
    updateWebhook: (
      accountId: string,
      webhookId: string,
      body: RequestBody<"/api/v1/admin/accounts/{id}/webhooks/{wid}", "patch">,
    ) =>
      this.ok(
        this.api.PATCH("/api/v1/admin/accounts/{id}/webhooks/{wid}", {
          params: { path: { id: accountId, wid: webhookId } },
          body,
        }),
      ),
    rotateWebhookSecret: (accountId: string, webhookId: string) =>
      this.ok(
        this.api.POST("/api/v1/admin/accounts/{id}/webhooks/{wid}/rotate-secret", {
          params: { path: { id: accountId, wid: webhookId } },
        }),
      ),
    replayWebhook: (
      accountId: string,
      webhookId: string,
      body: RequestBody<"/api/v1/admin/accounts/{id}/webhooks/{wid}/replay", "post">,
    ) =>
      this.ok(
        this.api.POST("/api/v1/admin/accounts/{id}/webhooks/{wid}/replay", {
          params: { path: { id: accountId, wid: webhookId } },
          body,
        }),
      ),
    removeWebhook: (accountId: string, webhookId: string) =>
      this.ok(
        this.api.DELETE("/api/v1/admin/accounts/{id}/webhooks/{wid}", {
          params: { path: { id: accountId, wid: webhookId } },
        }),
      ),
    /** Folds the event log again into the usage tables (every account, or one); answers when done. */
    refoldUsage: (body: RequestBody<"/api/v1/admin/refold-usage", "post"> = {}) =>
      this.ok(this.api.POST("/api/v1/admin/refold-usage", { body })),
    /** One page of the audit log, newest first: `{ entries, next_before }`. */
    audit: (query: QueryOf<"/api/v1/admin/audit", "get"> = {}) =>
      this.ok(this.api.GET("/api/v1/admin/audit", { params: { query } })),
    /** Every audit entry, newest first. */
    allAudit: async function* (this: Parley, pageSize = 100): AsyncGenerator<AuditEntry> {
      let before: QueryOf<"/api/v1/admin/audit", "get">["before"];
      for (;;) {
        const page = await this.admin.audit({ limit: pageSize, before });
        yield* page.entries;
        if (page.next_before === null || page.next_before === undefined || page.entries.length === 0) return;
        before = page.next_before;
      }
    }.bind(this),
  };
}

/** Items of an offset-paged list, asked for `size` at a time until a short page. */
async function* byOffset<T>(size: number, page: (size: number, offset: number) => Promise<T[]>): AsyncGenerator<T> {
  for (let offset = 0; ; offset += size) {
    const items = await page(size, offset);
    yield* items;
    if (items.length < size) return;
  }
}
