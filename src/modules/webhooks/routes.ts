/**
 * Webhooks, a consumer of the event catalogue (src/modules/catalogue): endpoints with their
 * delivery log, retry and replay. Every route takes the account's API key.
 */
import { Elysia, t } from "elysia";
import { auth, authenticateFirst } from "../auth";
import { AppError } from "../../core/errors";
import { errorResponses } from "../../http/errors";
import { reportMetricLines } from "../../http/metrics";
import { WebhooksModel } from "./model";
import {
  createEndpoint,
  deleteEndpoint,
  endpointGauges,
  getEndpoint,
  listEndpoints,
  rotateSecret,
  updateEndpoint,
} from "./service";
import { listDeliveries, replay, retryDelivery } from "./delivery-log";

const IdParams = t.Object({ id: t.String({ maxLength: 64 }) });

// The endpoints by state, and their backlogs, on /metrics.
reportMetricLines(endpointGauges);

export const webhooksController = new Elysia({
  name: "parley.webhooks",
  prefix: "/api/v1/webhooks",
  detail: { tags: ["webhooks"] },
})
  .use(auth)
  .onTransform(authenticateFirst)
  .post(
    "",
    async ({ account, body, set }) => {
      set.status = 201;
      return createEndpoint(account.id, body);
    },
    {
      apiKey: true,
      body: WebhooksModel.endpointCreate,
      response: { 201: WebhooksModel.endpointWithSecret, ...errorResponses(400, 401, 422) },
      detail: { summary: "Add a webhook endpoint; its whsec_ signing secret is shown only in this answer" },
    },
  )
  .get("", async ({ account }) => ({ endpoints: await listEndpoints(account.id) }), {
    apiKey: true,
    response: { 200: t.Object({ endpoints: t.Array(WebhooksModel.endpoint) }), ...errorResponses(401) },
    detail: { summary: "The account's webhook endpoints" },
  })
  .get("/:id", async ({ account, params }) => getEndpoint(account.id, params.id), {
    apiKey: true,
    params: IdParams,
    response: { 200: WebhooksModel.endpoint, ...errorResponses(401, 404) },
    detail: { summary: "One webhook endpoint" },
  })
  .patch("/:id", async ({ account, params, body }) => updateEndpoint(account.id, params.id, body), {
    apiKey: true,
    params: IdParams,
    body: WebhooksModel.endpointUpdate,
    response: { 200: WebhooksModel.endpoint, ...errorResponses(400, 401, 404, 422) },
    detail: { summary: "Change a webhook endpoint; enabled: true resumes one Parley disabled" },
  })
  .delete(
    "/:id",
    async ({ account, params, set }) => {
      await deleteEndpoint(account.id, params.id);
      set.status = 204;
    },
    {
      apiKey: true,
      params: IdParams,
      response: { 204: t.Void({ description: "Removed, and its delivery log with it" }), ...errorResponses(401, 404) },
      detail: { summary: "Remove a webhook endpoint and its delivery log" },
    },
  )
  .post("/:id/rotate-secret", async ({ account, params }) => rotateSecret(account.id, params.id), {
    apiKey: true,
    params: IdParams,
    response: { 200: WebhooksModel.endpointWithSecret, ...errorResponses(401, 404) },
    detail: { summary: "A new signing secret, shown once; the old one keeps signing beside it for 24 hours" },
  })
  .get(
    "/:id/deliveries",
    async ({ account, params, query }) => ({ deliveries: await listDeliveries(account.id, params.id, query) }),
    {
      apiKey: true,
      params: IdParams,
      query: WebhooksModel.deliveryQuery,
      response: { 200: t.Object({ deliveries: t.Array(WebhooksModel.delivery) }), ...errorResponses(400, 401, 404) },
      detail: {
        summary:
          "The endpoint's deliveries, newest first: event, attempts, " +
          "last status code, latency, first 1 KB of the answer, next retry",
      },
    },
  )
  .post(
    "/:id/deliveries/:delivery/retry",
    async ({ account, params, set }) => {
      const deliveryId = /^\d{1,15}$/.test(params.delivery) ? Number(params.delivery) : Number.NaN;
      if (!Number.isSafeInteger(deliveryId)) throw new AppError("not_found", `no delivery ${params.delivery}`);
      await retryDelivery(account.id, params.id, deliveryId);
      set.status = 202;
      return { queued: 1 };
    },
    {
      apiKey: true,
      params: t.Object({ id: t.String({ maxLength: 64 }), delivery: t.String({ maxLength: 20 }) }),
      response: { 202: WebhooksModel.replayed, ...errorResponses(401, 404) },
      detail: { summary: "Send one delivery again now" },
    },
  )
  .post(
    "/:id/replay",
    async ({ account, params, body, set }) => {
      const queued = await replay(account.id, params.id, body);
      set.status = 202;
      return { queued };
    },
    {
      apiKey: true,
      params: IdParams,
      body: WebhooksModel.replay,
      response: { 202: WebhooksModel.replayed, ...errorResponses(400, 401, 404, 422) },
      detail: { summary: "Send every kept event since a time or after a sequence number to the endpoint again" },
    },
  );
