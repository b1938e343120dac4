/**
 * The admin API at /api/v1/admin: every command of the operator's command line as a route,
 * for an operator credential only (guard.ts). Each change leaves an audit entry, readable at
 * GET /audit. docs/admin-api.md describes it.
 */
import { Elysia } from "elysia";
import { errorResponses } from "../../http/errors";
import { listOperators } from "../operators";
import { WebhooksModel } from "../webhooks";
import { AuditModel, listAudit } from "../audit";
import { operatorGuard } from "./guard";
import { errorAnswers } from "../../http/openapi";
import { isLocalRequest } from "./local";
import { AdminModel } from "./model";
import {
  accountsReport,
  adminAddNumber,
  adminAddWebhook,
  adminCreateAccount,
  adminCreateKey,
  adminCreateOperator,
  adminLimits,
  adminListNumbers,
  adminListWebhooks,
  adminRefold,
  adminRemoveNumber,
  adminRemoveWebhook,
  adminReplayWebhook,
  adminRevokeKey,
  adminRevokeSigningKey,
  adminRotateSigningKey,
  adminRotateWebhookSecret,
  adminSetDefaultNumber,
  adminSetJitsiDomain,
  adminSetLimit,
  adminUpdateWebhook,
} from "./service";
import { createOperatorToken, listOperatorTokens, revokeOperatorToken } from "./tokens";

export const ADMIN_PREFIX = "/api/v1/admin";

export const adminController = new Elysia({
  name: "parley.admin",
  prefix: ADMIN_PREFIX,
  // Operator tokens are looked up in the database: without it, 503. Write routes list their 403 (a read-only token).
  detail: { tags: ["admin"], security: [{ operatorToken: [] }], responses: errorAnswers("401", "503") },
})
  .use(operatorGuard)
  .get("/accounts", async () => ({ accounts: await accountsReport() }), {
    response: { 200: AdminModel.accounts, ...errorResponses(401) },
    detail: { summary: "Every account with its API keys (never the keys themselves) and signing keys (list-accounts)" },
  })
  .post(
    "/accounts",
    async ({ caller, body, set }) => {
      set.status = 201;
      return adminCreateAccount(caller, body.name, body.alg);
    },
    {
      body: AdminModel.createAccount,
      response: { 201: AdminModel.createdAccount, ...errorResponses(400, 401, 403) },
      detail: { summary: "Make an account; its first API key is shown only in this answer (create-account)" },
    },
  )
  .post(
    "/accounts/:id/keys",
    async ({ caller, params, body, set }) => {
      set.status = 201;
      return adminCreateKey(caller, params.id, body?.label ?? "");
    },
    {
      params: AdminModel.accountParams,
      body: AdminModel.createKey,
      response: { 201: AdminModel.createdKey, ...errorResponses(400, 401, 403, 404) },
      detail: { summary: "Another API key for the account, shown only in this answer (create-key)" },
    },
  )
  .delete("/keys/:keyId", async ({ caller, params }) => adminRevokeKey(caller, params.keyId), {
    params: AdminModel.keyParams,
    response: { 200: AdminModel.revokedKey, ...errorResponses(400, 401, 403, 404) },
    detail: { summary: "Revoke an API key: it stops working at once, on every process (revoke-key)" },
  })
  .post(
    "/accounts/:id/signing-keys",
    async ({ caller, params, body, set }) => {
      set.status = 201;
      return adminRotateSigningKey(caller, params.id, body?.alg);
    },
    {
      params: AdminModel.accountParams,
      body: AdminModel.rotateSigningKey,
      response: { 201: AdminModel.rotatedSigningKey, ...errorResponses(400, 401, 403, 404) },
      detail: { summary: "A new current signing key; the old one verifies until its tokens expire (rotate-key)" },
    },
  )
  .delete("/signing-keys/:kid", async ({ caller, params }) => adminRevokeSigningKey(caller, params.kid), {
    params: AdminModel.kidParams,
    response: { 200: AdminModel.revokedSigningKey, ...errorResponses(400, 401, 403, 404) },
    detail: { summary: "Withdraw a signing key at once; a current key is replaced (revoke-signing-key)" },
  })
  .put(
    "/accounts/:id/jitsi-domain",
    async ({ caller, params, body }) => adminSetJitsiDomain(caller, params.id, body.domain),
    {
      params: AdminModel.accountParams,
      body: AdminModel.jitsiDomain,
      response: { 200: AdminModel.jitsiDomainSet, ...errorResponses(400, 401, 403, 404, 422) },
      detail: { summary: "The sub of the account's media tokens: the Jitsi domain or tenant, or * (set-jitsi-domain)" },
    },
  )
  .get("/accounts/:id/numbers", async ({ params }) => ({ numbers: await adminListNumbers(params.id) }), {
    params: AdminModel.accountParams,
    response: { 200: AdminModel.numbers, ...errorResponses(401, 404) },
    detail: { summary: "The account's dial-in numbers, default first (list-numbers)" },
  })
  .post(
    "/accounts/:id/numbers",
    async ({ caller, params, body, set }) => {
      set.status = 201;
      return adminAddNumber(caller, params.id, body);
    },
    {
      params: AdminModel.accountParams,
      body: AdminModel.addNumber,
      response: { 201: AdminModel.number, ...errorResponses(400, 401, 403, 404, 409, 422) },
      detail: { summary: "Add a dial-in number (add-number)" },
    },
  )
  .post("/numbers/:id/default", async ({ caller, params }) => adminSetDefaultNumber(caller, params.id), {
    params: AdminModel.numericParams,
    response: { 200: AdminModel.number, ...errorResponses(400, 401, 403, 404) },
    detail: { summary: "Make the number its account's default, the one jitsi-meet shows first (set-default-number)" },
  })
  .delete("/numbers/:id", async ({ caller, params }) => adminRemoveNumber(caller, params.id), {
    params: AdminModel.numericParams,
    response: { 200: AdminModel.removedNumber, ...errorResponses(400, 401, 403, 404) },
    detail: { summary: "Stop listing a dial-in number (remove-number)" },
  })
  .get("/accounts/:id/limits", async ({ params }) => adminLimits(params.id), {
    params: AdminModel.accountParams,
    response: { 200: AdminModel.limits, ...errorResponses(401, 404) },
    detail: { summary: "The account's limits with their defaults and overrides; docs/limits.md (show-limits)" },
  })
  .put(
    "/accounts/:id/limits/:name",
    async ({ caller, params, body }) => adminSetLimit(caller, params.id, params.name, body.value),
    {
      params: AdminModel.limitParams,
      body: AdminModel.setLimit,
      response: { 200: AdminModel.limits, ...errorResponses(400, 401, 403, 404) },
      detail: {
        summary:
          "Change one limit of the account, or set it back to its " +
          "default; every process applies it at once (set-limit)",
      },
    },
  )
  .get(
    "/operators",
    async () => ({
      operators: (await listOperators()).map((operator) => ({
        id: operator.id,
        name: operator.name,
        created_at: operator.createdAt.toISOString(),
      })),
    }),
    { response: { 200: AdminModel.operators, ...errorResponses(401) }, detail: { summary: "The console's operators" } },
  )
  .post(
    "/operators",
    async ({ caller, body, set }) => {
      set.status = 201;
      return adminCreateOperator(caller, body.name, body.password);
    },
    {
      body: AdminModel.createOperator,
      response: { 201: AdminModel.createdOperator, ...errorResponses(400, 401, 403, 409, 422) },
      detail: { summary: "A console operator, who sees every account (create-operator)" },
    },
  )
  .get("/operator-tokens", async () => ({ tokens: await listOperatorTokens() }), {
    response: { 200: AdminModel.operatorTokens, ...errorResponses(401) },
    detail: { summary: "Operator tokens, revoked ones included (never the tokens themselves)" },
  })
  .post(
    "/operator-tokens",
    async ({ caller, body, set }) => {
      set.status = 201;
      return createOperatorToken(caller, body.name, body.scope);
    },
    {
      body: AdminModel.createOperatorToken,
      response: { 201: AdminModel.createdOperatorToken, ...errorResponses(400, 401, 403) },
      detail: { summary: "An operator token for scripts; shown only in this answer (create-operator-token)" },
    },
  )
  .delete(
    "/operator-tokens/:id",
    async ({ caller, params }) => {
      await revokeOperatorToken(caller, params.id);
      return { revoked: true as const, id: params.id };
    },
    {
      params: AdminModel.numericParams,
      response: { 200: AdminModel.revokedOperatorToken, ...errorResponses(400, 401, 403, 404) },
      detail: { summary: "Revoke an operator token: it stops working at once (revoke-operator-token)" },
    },
  )
  .get(
    "/accounts/:id/webhooks",
    async ({ caller, params }) => ({ webhooks: await adminListWebhooks(caller, params.id) }),
    {
      params: AdminModel.accountParams,
      response: { 200: AdminModel.webhooks, ...errorResponses(401, 404) },
      detail: { summary: "The account's webhook endpoints (list-webhooks)" },
    },
  )
  .post(
    "/accounts/:id/webhooks",
    async ({ caller, params, body, set }) => {
      set.status = 201;
      return adminAddWebhook(caller, params.id, body);
    },
    {
      params: AdminModel.accountParams,
      body: WebhooksModel.endpointCreate,
      response: { 201: WebhooksModel.endpointWithSecret, ...errorResponses(400, 401, 403, 404, 422) },
      detail: { summary: "Add a webhook endpoint; its secret is shown only in this answer (add-webhook)" },
    },
  )
  .patch(
    "/accounts/:id/webhooks/:wid",
    async ({ caller, params, body }) => adminUpdateWebhook(caller, params.id, params.wid, body),
    {
      params: AdminModel.webhookParams,
      body: WebhooksModel.endpointUpdate,
      response: { 200: WebhooksModel.endpoint, ...errorResponses(400, 401, 403, 404, 422) },
      detail: { summary: "Change a webhook endpoint (update-webhook)" },
    },
  )
  .post(
    "/accounts/:id/webhooks/:wid/rotate-secret",
    async ({ caller, params }) => adminRotateWebhookSecret(caller, params.id, params.wid),
    {
      params: AdminModel.webhookParams,
      response: { 200: WebhooksModel.endpointWithSecret, ...errorResponses(401, 403, 404) },
      detail: {
        summary: "A new signing secret, shown once; the old one signs beside it for 24 hours (rotate-webhook-secret)",
      },
    },
  )
  .post(
    "/accounts/:id/webhooks/:wid/replay",
    async ({ caller, params, body }) => adminReplayWebhook(caller, params.id, params.wid, body),
    {
      params: AdminModel.webhookParams,
      body: WebhooksModel.replay,
      response: { 200: WebhooksModel.replayed, ...errorResponses(400, 401, 403, 404, 422) },
      detail: { summary: "Send the kept events since a time or after a sequence number again (replay-webhook)" },
    },
  )
  .delete(
    "/accounts/:id/webhooks/:wid",
    async ({ caller, params }) => adminRemoveWebhook(caller, params.id, params.wid),
    {
      params: AdminModel.webhookParams,
      response: { 200: AdminModel.removedWebhook, ...errorResponses(401, 403, 404) },
      detail: { summary: "Delete a webhook endpoint and its delivery log (remove-webhook)" },
    },
  )
  .post(
    "/refold-usage",
    async ({ caller, body, request, server }) => {
      // A refold of a long log answers when done: Bun's idle timeout would close the connection
      // first. The socket's own listener has already lifted it for the requests it serves.
      if (!isLocalRequest(request)) server?.timeout(request, 0);
      return adminRefold(caller, body?.account_id);
    },
    {
      body: AdminModel.refold,
      response: { 200: AdminModel.refolded, ...errorResponses(400, 401, 403, 404) },
      detail: {
        summary:
          "Fold the event log again into the usage tables, for every account or one; answers when done (refold-usage)",
      },
    },
  )
  .get("/audit", async ({ query }) => listAudit(query), {
    query: AuditModel.query,
    response: { 200: AuditModel.page, ...errorResponses(400, 401) },
    detail: { summary: "The audit log of changes made through the admin API, newest first" },
  });
