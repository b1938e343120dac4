/**
 * `new Parley({ baseUrl, apiKey })`: a thin layer over the generated types and openapi-fetch,
 * one group of methods per route family. Every answer other than 2xx becomes a ParleyError
 * with the API's `error.code`; 429 and 503 are tried again after their Retry-After.
 *
 * The class is the package's face; how it reaches Parley is transport.ts, and each group of
 * methods is made in client-meetings.ts, client-chat.ts, client-events.ts or client-admin.ts.
 */
import type { Client } from "openapi-fetch";
import type { RequestBody } from "./api-types.js";
import { type AdminMethods, adminMethods } from "./client-admin.js";
import { type ChatMethods, chatMethods, type UploadsMethods, uploadMethods } from "./client-chat.js";
import {
  type EventsMethods,
  eventMethods,
  type UsageMethods,
  usageMethods,
  type WebhooksMethods,
  webhookMethods,
} from "./client-events.js";
import {
  type MapperMethods,
  mapperMethods,
  type SchedulerMethods,
  schedulerMethods,
  type StreamingMethods,
  streamingMethods,
} from "./client-meetings.js";
import type { paths } from "./generated/openapi.js";
import { type ParleyOptions, Transport } from "./transport.js";

export class Parley {
  /** The typed client of every route, for what the methods below do not cover: `parley.api.GET("/healthz")`. */
  readonly api: Client<paths>;
  private readonly transport: Transport;
  /** Conferences and reservations (docs/scheduling.md); account API key. */
  readonly scheduler: SchedulerMethods;
  /** Jitsi's conference mapper and dial-in numbers (docs/mapper.md). */
  readonly mapper: MapperMethods;
  /** Live streams and recordings of a room (docs/streaming.md); account API key. */
  readonly streaming: StreamingMethods;
  /** Chat rooms and messages (docs/chat.md), as the user of the client's token (`parley.with({ token })`). */
  readonly chat: ChatMethods;
  /** Files for chat, straight into object storage (docs/chat.md), as the token's user. */
  readonly uploads: UploadsMethods;
  /** The usage report (docs/usage.md): the account API key, or a `parley`-scope token. */
  readonly usage: UsageMethods;
  /** The account's event log and event stream (docs/webhooks.md); account API key. */
  readonly events: EventsMethods;
  /** Webhook endpoints and their deliveries (docs/webhooks.md); account API key. */
  readonly webhooks: WebhooksMethods;
  /**
   * Parley's operators' routes (/api/v1/admin), for an operator token (`operatorToken`; a
   * `read` token may only list) or the local socket. Each change is written to the audit log.
   */
  readonly admin: AdminMethods;

  constructor(private readonly options: ParleyOptions) {
    this.transport = new Transport(options);
    this.api = this.transport.api;
    this.scheduler = schedulerMethods(this.transport);
    this.mapper = mapperMethods(this.transport);
    this.streaming = streamingMethods(this.transport);
    this.chat = chatMethods(this.transport);
    this.uploads = uploadMethods(this.transport);
    this.usage = usageMethods(this.transport);
    this.events = eventMethods(this.transport);
    this.webhooks = webhookMethods(this.transport);
    this.admin = adminMethods(this.transport);
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
    const answer = await this.transport.ok(this.api.POST("/api/v1/misc/generate-token", { body: claims }));
    return answer.token;
  }
}
