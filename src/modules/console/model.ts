/**
 * The shapes of the console API's sign-in, session and shared query and body fields, checked
 * as every route's are. Apart from the routes so that each file of them (routes.ts,
 * webhook-routes.ts) takes the same ones.
 */
import { t } from "elysia";

export const ConsoleModel = {
  login: t.Object({
    name: t.Optional(t.String({ maxLength: 64, description: "Operator name (with password)" })),
    password: t.Optional(t.String({ maxLength: 1024 })),
    api_key: t.Optional(t.String({ maxLength: 256, description: "An account's API key, for its owner" })),
  }),
  session: t.Union([
    t.Object({
      signed_in: t.Literal(true),
      kind: t.Union([t.Literal("operator"), t.Literal("account")]),
      name: t.String(),
      account_id: t.Union([t.String(), t.Null()], {
        description: "The one account an owner's session sees; null for an operator",
      }),
      csrf_token: t.String({ description: "Send as X-CSRF-Token on every call that changes something" }),
    }),
    t.Object({ signed_in: t.Literal(false) }, { description: "No session, or one that expired or was revoked" }),
  ]),
  accountQuery: t.Object({ account: t.Optional(t.String({ maxLength: 64 })) }),
  accountBody: t.Object({ account: t.String({ maxLength: 64 }) }),
  endpointParams: t.Object({ id: t.String({ maxLength: 64 }) }),
  window: t.Object({
    account: t.Optional(t.String({ maxLength: 64 })),
    start: t.Optional(t.String({ maxLength: 64 })),
    end: t.Optional(t.String({ maxLength: 64 })),
  }),
};
