/** The admin API's wire types, declared once: validation, the handlers' answers and OpenAPI read them. */
import { t } from "elysia";
import { Name } from "../../http/text";
import { SIGNING_ALGORITHMS } from "../../core/config";
import { WebhooksModel } from "../webhooks";

const Time = (description: string) => t.String({ format: "date-time", description });
const NullableTime = (description: string) => t.Union([Time(description), t.Null()]);
const AccountId = t.String({ minLength: 1, maxLength: 64, description: "The account's id (acc_…)" });
const WebhookId = t.String({ minLength: 1, maxLength: 64 });
const Algorithm = t.Optional(
  t.UnionEnum(SIGNING_ALGORITHMS, {
    description: "Signing algorithm of the account's tokens (default SIGNING_ALGORITHM)",
  }),
);
const Scope = t.UnionEnum(["read", "full"], { description: "read: GET routes only; full: every route" });

const ApiKey = t.Object({
  id: t.Integer(),
  label: t.String(),
  prefix: t.String({
    description: "The key's first characters, to tell keys apart; the key itself is never shown again",
  }),
  created_at: Time("When it was made"),
  revoked_at: NullableTime("When it was revoked; null while it works"),
});

const SigningKey = t.Object({
  kid: t.String(),
  algorithm: t.String(),
  created_at: Time("When it was made"),
  retired_at: NullableTime("When it stopped signing; null for the current key"),
  verify_until: NullableTime("Until when tokens it signed still verify"),
});

const PhoneNumber = t.Object({
  id: t.Integer(),
  account_id: t.String(),
  country_code: t.String({ description: "ISO 3166-1 alpha-2" }),
  formatted_number: t.String(),
  toll_free: t.Boolean(),
  is_default: t.Boolean({ description: "The number jitsi-meet shows first" }),
});

const Limit = t.Object({
  name: t.String(),
  value: t.Number(),
  default: t.Number(),
  overridden: t.Boolean(),
  per: t.String(),
  description: t.String(),
  used: t.Union([t.Number(), t.Null()], {
    description: "What the account uses now, for quotas counted in the database; null for the others",
  }),
});

export const AdminModel = {
  accountParams: t.Object({ id: AccountId }),
  webhookParams: t.Object({ id: AccountId, wid: WebhookId }),
  numericParams: t.Object({ id: t.Integer({ minimum: 1, maximum: 2_147_483_647 }) }),
  keyParams: t.Object({ keyId: t.Integer({ minimum: 1, maximum: 2_147_483_647 }) }),
  kidParams: t.Object({ kid: t.String({ minLength: 1, maxLength: 64 }) }),
  limitParams: t.Object({ id: AccountId, name: t.String({ minLength: 1, maxLength: 64 }) }),

  accounts: t.Object({
    accounts: t.Array(
      t.Object({
        id: t.String(),
        name: t.String(),
        created_at: Time("When it was made"),
        signing_algorithm: t.String(),
        jitsi_domain: t.String({ description: "The sub of the account's media tokens" }),
        keys: t.Array(ApiKey),
        signing_keys: t.Array(SigningKey),
      }),
    ),
  }),
  createAccount: t.Object({ name: Name({ minLength: 1, maxLength: 128 }), alg: Algorithm }),
  createdAccount: t.Object({
    account: t.Object({ id: t.String(), name: t.String(), signing_algorithm: t.String() }),
    api_key: t.String({ description: "Shown only in this answer: it is stored as a hash" }),
    key_id: t.Integer(),
    kid: t.String({ description: "The account's signing key" }),
  }),
  // Bodies whose members are all optional may be left out.
  createKey: t.Optional(t.Object({ label: t.Optional(Name({ maxLength: 128 })) })),
  createdKey: t.Object({
    key_id: t.Integer(),
    api_key: t.String({ description: "Shown only in this answer" }),
    prefix: t.String(),
  }),
  revokedKey: t.Object({ revoked: t.Literal(true), key_id: t.Integer() }),
  rotateSigningKey: t.Optional(t.Object({ alg: Algorithm })),
  rotatedSigningKey: t.Object({
    account_id: t.String(),
    kid: t.String({ description: "The new current key; earlier keys verify until their tokens expire" }),
  }),
  revokedSigningKey: t.Object({
    revoked: t.Literal(true),
    account_id: t.String(),
    kid: t.String(),
    new_kid: t.Union([t.String(), t.Null()], {
      description: "The key made current in its place, when the revoked one was current",
    }),
  }),
  jitsiDomain: t.Object({
    domain: t.String({ minLength: 1, maxLength: 253, description: "meet.example.com, a tenant name, or *" }),
  }),
  jitsiDomainSet: t.Object({ account_id: t.String(), jitsi_domain: t.String() }),

  numbers: t.Object({ numbers: t.Array(PhoneNumber) }),
  number: PhoneNumber,
  addNumber: t.Object({
    country: t.String({ minLength: 1, maxLength: 8, description: "ISO 3166-1 alpha-2 code, e.g. US" }),
    number: t.String({ minLength: 1, maxLength: 64, description: "As people write it: +1 555 0100" }),
    toll_free: t.Optional(t.Boolean()),
    default: t.Optional(t.Boolean({ description: "Make it the number jitsi-meet shows first" })),
  }),
  removedNumber: t.Object({ removed: t.Literal(true), ...PhoneNumber.properties }),

  limits: t.Object({ account_id: t.String(), limits: t.Array(Limit) }),
  setLimit: t.Object({
    value: t.Union([t.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }), t.Literal("default")], {
      description: 'A whole number, or "default" to drop the account\'s own value',
    }),
  }),

  operators: t.Object({
    operators: t.Array(t.Object({ id: t.Integer(), name: t.String(), created_at: Time("When it was made") })),
  }),
  createOperator: t.Object({
    name: Name({ minLength: 1, maxLength: 64 }),
    password: t.String({
      minLength: 8,
      maxLength: 1024,
      description: "At least 8 characters; stored as an argon2id hash",
    }),
  }),
  createdOperator: t.Object({ id: t.Integer(), name: t.String() }),

  operatorTokens: t.Object({
    tokens: t.Array(
      t.Object({
        id: t.Integer(),
        name: t.String(),
        scope: Scope,
        prefix: t.String(),
        created_by: t.String(),
        created_at: Time("When it was made"),
        last_used_at: NullableTime("When it was last used (to the minute)"),
        revoked_at: NullableTime("When it was revoked"),
      }),
    ),
  }),
  createOperatorToken: t.Object({ name: Name({ minLength: 1, maxLength: 128 }), scope: Scope }),
  createdOperatorToken: t.Object({
    id: t.Integer(),
    name: t.String(),
    scope: Scope,
    prefix: t.String(),
    token: t.String({ description: "pop_…, shown only in this answer: it is stored as a hash" }),
  }),
  revokedOperatorToken: t.Object({ revoked: t.Literal(true), id: t.Integer() }),

  webhooks: t.Object({ webhooks: t.Array(WebhooksModel.endpoint) }),
  removedWebhook: t.Object({ removed: t.Literal(true), webhook_id: t.String() }),
  refold: t.Optional(t.Object({ account_id: t.Optional(AccountId) })),
  refolded: t.Object({
    events: t.Integer({ description: "Events folded again" }),
    ms: t.Integer({ description: "How long it took" }),
  }),
};
