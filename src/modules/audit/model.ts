/** The audit log's wire types: the admin API and the console answer with the same entries. */
import { t } from "elysia";

const Time = (description: string) => t.String({ format: "date-time", description });

/**
 * What was asked for, never a secret: the members each action writes (src/modules/admin/service.ts).
 * Open to more, so an action that learns a member is not cut short by this list.
 */
const AuditDetail = t.Object(
  {
    name: t.Optional(t.String({ description: "An account's, operator's or token's name; set-limit: the limit's" })),
    value: t.Optional(
      t.Union([t.Number(), t.Literal("default")], { description: "set-limit: the new value, or default" }),
    ),
    signing_algorithm: t.Optional(t.String()),
    algorithm: t.Optional(t.String()),
    kid: t.Optional(t.String({ description: "A signing key's id" })),
    new_kid: t.Optional(t.String({ description: "revoke-signing-key: the key that replaced a current one" })),
    key_id: t.Optional(t.Integer({ description: "An API key's id" })),
    key_prefix: t.Optional(t.String({ description: "The first characters of an API key, to recognise it" })),
    label: t.Optional(t.String()),
    jitsi_domain: t.Optional(t.String()),
    number_id: t.Optional(t.Integer()),
    country_code: t.Optional(t.String()),
    formatted_number: t.Optional(t.String()),
    toll_free: t.Optional(t.Boolean()),
    is_default: t.Optional(t.Boolean()),
    webhook_id: t.Optional(t.String()),
    url: t.Optional(t.String({ description: "A webhook's URL without its query string" })),
    event_types: t.Optional(t.Union([t.Array(t.String()), t.Null()])),
    description: t.Optional(t.String()),
    enabled: t.Optional(t.Boolean()),
    ordered: t.Optional(t.Boolean()),
    since: t.Optional(t.String({ description: "replay-webhook: replayed events since this time" })),
    after: t.Optional(t.Integer()),
    queued: t.Optional(t.Integer({ description: "replay-webhook: deliveries queued" })),
    events: t.Optional(t.Integer({ description: "refold-usage: events folded" })),
    ms: t.Optional(t.Integer({ description: "refold-usage: how long it took" })),
    scope: t.Optional(t.String({ description: "An operator token's scope" })),
    prefix: t.Optional(t.String({ description: "The first characters of an operator token" })),
  },
  { additionalProperties: true, description: "What was asked for; never a secret" },
);

const AuditEntry = t.Object({
  id: t.Integer(),
  at: Time("When the change was made"),
  actor: t.String({ description: "The operator token's name, or local:<uid> for the Unix socket" }),
  actor_kind: t.UnionEnum(["token", "local"], { description: "token: an operator token; local: the Unix socket" }),
  action: t.String({ description: "The command's name: create-account, set-limit, …" }),
  target: t.Union([t.String(), t.Null()], {
    description: "What it changed: an account id, key:<id>, token:<id>, operator:<id>; null for every account",
  }),
  address: t.String({ description: "The caller's IP address, or unix:<socket path>" }),
  detail: AuditDetail,
});

export const AuditModel = {
  query: t.Object({
    limit: t.Optional(t.Integer({ minimum: 1, maximum: 500, default: 50 })),
    before: t.Optional(
      t.Integer({ minimum: 1, description: "An entry id (next_before of the previous page): only older entries" }),
    ),
  }),
  page: t.Object({
    entries: t.Array(AuditEntry),
    next_before: t.Union([t.Integer(), t.Null()], {
      description: "Pass as before for the next page; null on the last page",
    }),
  }),
};
