/**
 * Webhook endpoints and their deliveries, as the admin API and the console manage them for an
 * account. Its routes are in ./routes.ts, mounted by the app; the worker that delivers
 * (./worker.ts) is started by its role, and reads the rest of the feature from inside it.
 */
export { type EndpointCreate, type EndpointUpdate, WebhooksModel } from "./model";
export {
  createEndpoint,
  deleteEndpoint,
  listEndpoints,
  redactedUrl,
  rotateSecret,
  updateEndpoint,
} from "./service";
export { listDeliveries, replay, retryDelivery } from "./delivery-log";
