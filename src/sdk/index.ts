/**
 * @parley/server-sdk: a typed client of Parley's HTTP API for servers (Node ≥ 20, Bun, Deno)
 * and, for the public routes, browsers. See docs/sdk.md.
 */
export type { Answer, AuditEntry, ChatMessage, QueryOf, RequestBody, WebhookDelivery } from "./api-types.js";
export { Parley } from "./client.js";
export { type LocalErrorCode, ParleyError, type ParleyErrorCode, WebhookVerificationError } from "./errors.js";
export { PARLEY_ERROR_CODES, PARLEY_EVENT_TYPES } from "./generated/codes.js";
export type { components, operations, paths } from "./generated/openapi.js";
export type { RetryOptions } from "./retry.js";
export type { ParleyOptions } from "./transport.js";
export {
  type EventOf,
  type ParleyEvent,
  type ParleyEventType,
  verifyWebhook,
  type WebhookHeaders,
} from "./webhooks.js";
