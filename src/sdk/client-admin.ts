/**
 * The client's methods for Parley's operators (/api/v1/admin): accounts, keys, numbers,
 * limits, operators, webhooks on an account's behalf, and the audit log. Apart because they
 * take an operator's credential, never an account's, and the command line is their main user.
 */
import type { AuditEntry, QueryOf, RequestBody } from "./api-types.js";
import type { Transport } from "./transport.js";

export function adminMethods(transport: Transport) {
  const { api, ok } = transport;
  const admin = {
    listAccounts: () => ok(api.GET("/api/v1/admin/accounts")),
    /** A new account and its first API key, shown this once. */
    createAccount: (body: RequestBody<"/api/v1/admin/accounts", "post">) =>
      ok(api.POST("/api/v1/admin/accounts", { body })),
    createKey: (accountId: string, body: RequestBody<"/api/v1/admin/accounts/{id}/keys", "post"> = {}) =>
      ok(api.POST("/api/v1/admin/accounts/{id}/keys", { params: { path: { id: accountId } }, body })),
    revokeKey: (keyId: number) => ok(api.DELETE("/api/v1/admin/keys/{keyId}", { params: { path: { keyId } } })),
    rotateSigningKey: (accountId: string, body: RequestBody<"/api/v1/admin/accounts/{id}/signing-keys", "post"> = {}) =>
      ok(api.POST("/api/v1/admin/accounts/{id}/signing-keys", { params: { path: { id: accountId } }, body })),
    revokeSigningKey: (kid: string) =>
      ok(api.DELETE("/api/v1/admin/signing-keys/{kid}", { params: { path: { kid } } })),
    setJitsiDomain: (accountId: string, domain: string) =>
      ok(
        api.PUT("/api/v1/admin/accounts/{id}/jitsi-domain", {
          params: { path: { id: accountId } },
          body: { domain },
        }),
      ),
    listNumbers: (accountId: string) =>
      ok(api.GET("/api/v1/admin/accounts/{id}/numbers", { params: { path: { id: accountId } } })),
    addNumber: (accountId: string, body: RequestBody<"/api/v1/admin/accounts/{id}/numbers", "post">) =>
      ok(api.POST("/api/v1/admin/accounts/{id}/numbers", { params: { path: { id: accountId } }, body })),
    setDefaultNumber: (numberId: number) =>
      ok(api.POST("/api/v1/admin/numbers/{id}/default", { params: { path: { id: numberId } } })),
    removeNumber: (numberId: number) =>
      ok(api.DELETE("/api/v1/admin/numbers/{id}", { params: { path: { id: numberId } } })),
    limits: (accountId: string) =>
      ok(api.GET("/api/v1/admin/accounts/{id}/limits", { params: { path: { id: accountId } } })),
    /** One limit of the account (docs/limits.md): a whole number, or "default" to drop the account's own value. */
    setLimit: (accountId: string, name: string, value: number | "default") =>
      ok(
        api.PUT("/api/v1/admin/accounts/{id}/limits/{name}", {
          params: { path: { id: accountId, name } },
          body: { value },
        }),
      ),
    listOperators: () => ok(api.GET("/api/v1/admin/operators")),
    createOperator: (body: RequestBody<"/api/v1/admin/operators", "post">) =>
      ok(api.POST("/api/v1/admin/operators", { body })),
    listOperatorTokens: () => ok(api.GET("/api/v1/admin/operator-tokens")),
    /** A new operator token (`pop_…`), shown this once. */
    createOperatorToken: (body: RequestBody<"/api/v1/admin/operator-tokens", "post">) =>
      ok(api.POST("/api/v1/admin/operator-tokens", { body })),
    revokeOperatorToken: (id: number) =>
      ok(api.DELETE("/api/v1/admin/operator-tokens/{id}", { params: { path: { id } } })),
    listWebhooks: (accountId: string) =>
      ok(api.GET("/api/v1/admin/accounts/{id}/webhooks", { params: { path: { id: accountId } } })),
    addWebhook: (accountId: string, body: RequestBody<"/api/v1/admin/accounts/{id}/webhooks", "post">) =>
      ok(api.POST("/api/v1/admin/accounts/{id}/webhooks", { params: { path: { id: accountId } }, body })),
    updateWebhook: (
      accountId: string,
      webhookId: string,
      body: RequestBody<"/api/v1/admin/accounts/{id}/webhooks/{wid}", "patch">,
    ) =>
      ok(
        api.PATCH("/api/v1/admin/accounts/{id}/webhooks/{wid}", {
          params: { path: { id: accountId, wid: webhookId } },
          body,
        }),
      ),
    rotateWebhookSecret: (accountId: string, webhookId: string) =>
      ok(
        api.POST("/api/v1/admin/accounts/{id}/webhooks/{wid}/rotate-secret", {
          params: { path: { id: accountId, wid: webhookId } },
        }),
      ),
    replayWebhook: (
      accountId: string,
      webhookId: string,
      body: RequestBody<"/api/v1/admin/accounts/{id}/webhooks/{wid}/replay", "post">,
    ) =>
      ok(
        api.POST("/api/v1/admin/accounts/{id}/webhooks/{wid}/replay", {
          params: { path: { id: accountId, wid: webhookId } },
          body,
        }),
      ),
    removeWebhook: (accountId: string, webhookId: string) =>
      ok(
        api.DELETE("/api/v1/admin/accounts/{id}/webhooks/{wid}", {
          params: { path: { id: accountId, wid: webhookId } },
        }),
      ),
    /** Folds the event log again into the usage tables (every account, or one); answers when done. */
    refoldUsage: (body: RequestBody<"/api/v1/admin/refold-usage", "post"> = {}) =>
      ok(api.POST("/api/v1/admin/refold-usage", { body })),
    /** One page of the audit log, newest first: `{ entries, next_before }`. */
    audit: (query: QueryOf<"/api/v1/admin/audit", "get"> = {}) =>
      ok(api.GET("/api/v1/admin/audit", { params: { query } })),
    /** Every audit entry, newest first. */
    allAudit: async function* (pageSize = 100): AsyncGenerator<AuditEntry> {
      let before: QueryOf<"/api/v1/admin/audit", "get">["before"];
      for (;;) {
        const page = await admin.audit({ limit: pageSize, before });
        yield* page.entries;
        if (page.next_before === null || page.next_before === undefined || page.entries.length === 0) return;
        before = page.next_before;
      }
    },
  };
  return admin;
}
export type AdminMethods = ReturnType<typeof adminMethods>;
