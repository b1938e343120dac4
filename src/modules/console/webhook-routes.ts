/**
 * The console's webhooks page: the routes of /api/v1/webhooks for the account in view, through
 * the same service, behind the console's session (guard.ts). Apart from the other console
 * routes (routes.ts) because they are a whole page's worth, and mirror another module's API.
 */
import { Elysia, t } from "elysia";
import { EVENT_TYPES } from "../catalogue";
import {
  createEndpoint,
  deleteEndpoint,
  listDeliveries,
  listEndpoints,
  replay,
  retryDelivery,
  rotateSecret,
  updateEndpoint,
  WebhooksModel,
} from "../webhooks";
import { API, consoleAuth } from "./guard";
import { ConsoleModel } from "./model";
import { requireAccount } from "./sessions";

export const consoleWebhookRoutes = new Elysia({
  name: "parley.console.webhooks",
  detail: { tags: ["console"], hide: true },
})
  .use(consoleAuth)
  .get(
    `${API}/webhooks`,
    async ({ viewer, query }) => ({
      endpoints: await listEndpoints(requireAccount(viewer, query.account)),
      event_types: EVENT_TYPES,
    }),
    { query: ConsoleModel.accountQuery },
  )
  .post(
    `${API}/webhooks`,
    async ({ viewer, body }) => {
      const { account, ...input } = body;
      return createEndpoint(requireAccount(viewer, account), input);
    },
    { body: t.Object({ account: t.String({ maxLength: 64 }), ...WebhooksModel.endpointCreate.properties }) },
  )
  .patch(
    `${API}/webhooks/:id`,
    async ({ viewer, params, body }) => {
      const { account, ...input } = body;
      return updateEndpoint(requireAccount(viewer, account), params.id, input);
    },
    {
      params: ConsoleModel.endpointParams,
      body: t.Object({ account: t.String({ maxLength: 64 }), ...WebhooksModel.endpointUpdate.properties }),
    },
  )
  .delete(
    `${API}/webhooks/:id`,
    async ({ viewer, params, query }) => {
      await deleteEndpoint(requireAccount(viewer, query.account), params.id);
      return { deleted: params.id };
    },
    { params: ConsoleModel.endpointParams, query: ConsoleModel.accountQuery },
  )
  .post(
    `${API}/webhooks/:id/rotate-secret`,
    async ({ viewer, params, body }) => rotateSecret(requireAccount(viewer, body.account), params.id),
    {
      params: ConsoleModel.endpointParams,
      body: ConsoleModel.accountBody,
    },
  )
  .get(
    `${API}/webhooks/:id/deliveries`,
    async ({ viewer, params, query }) => {
      const { account, ...filter } = query;
      return { deliveries: await listDeliveries(requireAccount(viewer, account), params.id, { limit: 50, ...filter }) };
    },
    {
      params: ConsoleModel.endpointParams,
      query: t.Object({ account: t.Optional(t.String({ maxLength: 64 })), ...WebhooksModel.deliveryQuery.properties }),
    },
  )
  .post(
    `${API}/webhooks/:id/deliveries/:delivery/retry`,
    async ({ viewer, params, body }) => {
      await retryDelivery(requireAccount(viewer, body.account), params.id, params.delivery);
      return { queued: 1 };
    },
    {
      params: t.Object({
        id: t.String({ maxLength: 64 }),
        delivery: t.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER }),
      }),
      body: ConsoleModel.accountBody,
    },
  )
  .post(
    `${API}/webhooks/:id/replay`,
    async ({ viewer, params, body }) => {
      const { account, ...from } = body;
      return { queued: await replay(requireAccount(viewer, account), params.id, from) };
    },
    {
      params: ConsoleModel.endpointParams,
      body: t.Object({ account: t.String({ maxLength: 64 }), ...WebhooksModel.replay.properties }),
    },
  );
