/**
 * The client's methods for the account's record, on its API key: the event log and its live
 * stream, webhook endpoints and their deliveries, and the usage report folded from the log.
 * Apart from the other groups because the stream alone reconnects and waits by itself.
 */
import type { QueryOf, RequestBody, WebhookDelivery } from "./api-types.js";
import { ParleyError } from "./errors.js";
import { retryDelayMs } from "./retry.js";
import { serverSentEvents } from "./sse.js";
import type { Transport } from "./transport.js";
import type { ParleyEvent, ParleyEventType } from "./webhooks.js";

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });

export function eventMethods(transport: Transport) {
  const { api, ok, raw, sendOnce } = transport;
  const events = {
    /** One page of the log: `{ events, next_after }`. */
    list: (query: QueryOf<"/api/v1/events", "get"> = {}) => ok(api.GET("/api/v1/events", { params: { query } })),
    /** Every kept event after `after` (0: the oldest kept), page by page, ending when it has caught up. */
    all: async function* (
      options: { after?: number; types?: ParleyEventType[]; pageSize?: number } = {},
    ): AsyncGenerator<ParleyEvent> {
      let after = options.after ?? 0;
      for (;;) {
        const page = await events.list({ after, limit: options.pageSize ?? 100, types: options.types?.join(",") });
        yield* page.events;
        const next = page.next_after;
        if (page.events.length === 0 || next === after) return;
        after = next;
      }
    },
    /**
     * The live stream (Server-Sent Events), from `after` (a sequence; absent: from now on).
     * It reconnects by itself after a dropped connection, sending Last-Event-ID, so nothing is
     * missed or repeated; it ends when `signal` aborts or the loop breaks. Refused with 429
     * or 503 (a cap on open streams reached, a dependency down), it waits what Retry-After
     * says and connects again, as many times in a row as `retry.retries` allows, then throws.
     */
    stream: async function* (
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
          const answer = await raw(
            "/api/v1/events/stream",
            {
              query: { types: options.types?.join(",") },
              headers: { accept: "text/event-stream", ...(lastId === undefined ? {} : { "last-event-id": lastId }) },
              signal: options.signal,
            },
            async (request) => {
              const answer = await sendOnce(request);
              refused.waitMs = retryDelayMs(answer, refusals, transport.options.retry);
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
    },
  };
  return events;
}
export type EventsMethods = ReturnType<typeof eventMethods>;

export function webhookMethods(transport: Transport) {
  const { api, ok } = transport;
  const webhooks = {
    /** A new endpoint and its signing secret (`whsec_…`), shown this once. */
    create: (body: RequestBody<"/api/v1/webhooks", "post">) => ok(api.POST("/api/v1/webhooks", { body })),
    list: () => ok(api.GET("/api/v1/webhooks")),
    get: (id: string) => ok(api.GET("/api/v1/webhooks/{id}", { params: { path: { id } } })),
    update: (id: string, body: RequestBody<"/api/v1/webhooks/{id}", "patch">) =>
      ok(api.PATCH("/api/v1/webhooks/{id}", { params: { path: { id } }, body })),
    remove: (id: string) => ok(api.DELETE("/api/v1/webhooks/{id}", { params: { path: { id } } })),
    rotateSecret: (id: string) => ok(api.POST("/api/v1/webhooks/{id}/rotate-secret", { params: { path: { id } } })),
    /** One page of the endpoint's deliveries, newest first. */
    deliveries: (id: string, query: QueryOf<"/api/v1/webhooks/{id}/deliveries", "get"> = {}) =>
      ok(api.GET("/api/v1/webhooks/{id}/deliveries", { params: { path: { id }, query } })),
    /** Every kept delivery of the endpoint, newest first. */
    allDeliveries: async function* (id: string, pageSize = 100): AsyncGenerator<WebhookDelivery> {
      let before: QueryOf<"/api/v1/webhooks/{id}/deliveries", "get">["before"];
      for (;;) {
        const { deliveries } = await webhooks.deliveries(id, { limit: pageSize, before });
        yield* deliveries;
        if (deliveries.length < pageSize) return;
        before = deliveries[deliveries.length - 1]!.id;
      }
    },
    retryDelivery: (id: string, delivery: string | number) =>
      ok(
        api.POST("/api/v1/webhooks/{id}/deliveries/{delivery}/retry", {
          params: { path: { id, delivery: String(delivery) } },
        }),
      ),
    replay: (id: string, body: RequestBody<"/api/v1/webhooks/{id}/replay", "post">) =>
      ok(api.POST("/api/v1/webhooks/{id}/replay", { params: { path: { id } }, body })),
  };
  return webhooks;
}
export type WebhooksMethods = ReturnType<typeof webhookMethods>;

export function usageMethods(transport: Transport) {
  const { api, ok, raw } = transport;
  const usage = {
    report: (body: RequestBody<"/api/v1/pricing/cdr", "post"> = {}) => ok(api.POST("/api/v1/pricing/cdr", { body })),
    /** The same report as CSV text. */
    reportCsv: async (body: RequestBody<"/api/v1/pricing/cdr", "post"> = {}) =>
      (
        await raw("/api/v1/pricing/cdr", {
          method: "POST",
          body: JSON.stringify(body),
          headers: { "content-type": "application/json", accept: "text/csv" },
        })
      ).text(),
  };
  return usage;
}
export type UsageMethods = ReturnType<typeof usageMethods>;
