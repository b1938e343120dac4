/**
 * The types the client's methods are written in, read from the generated description of the
 * API: a route's body, query and answer, and the items its paged lists yield. Apart from the
 * methods so that every group of them, and the package's users, name a route's shapes alike.
 */
import type { paths } from "./generated/openapi.js";

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
