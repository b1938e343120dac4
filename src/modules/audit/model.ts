/** The audit log's wire types: the admin API and the console answer with the same entries. */
import { t } from "elysia";
import { Cursor } from "../../http/cursor";

const Time = (description: string) => t.String({ format: "date-time", description });

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
  detail: t.Record(t.String(), t.Unknown(), { description: "What was asked for; never a secret" }),
});

export const AuditModel = {
  query: t.Object({
    limit: t.Optional(t.Integer({ minimum: 1, maximum: 500, default: 50 })),
    before: t.Optional(
      Cursor({ minimum: 1, description: "An entry id (next_before of the previous page): only older entries" }),
    ),
  }),
  page: t.Object({
    entries: t.Array(AuditEntry),
    next_before: t.Union([t.Integer(), t.Null()], {
      description: "Pass as before for the next page; null on the last page",
    }),
  }),
};
