/**
 * The operator's commands (the ones the `parley` command line lists), each on the service that owns the
 * data, followed by its audit entry. Those services commit on their own, so the entry is
 * written right after the change (audit.ts says what happens should that write fail).
 */
import type { SigningAlgorithm } from "../../core/config";
import {
  createAccount,
  createApiKey,
  getAccount,
  listAccounts,
  revokeApiKey,
  revokeSigningKey,
  rotateSigningKey,
  setJitsiDomain,
} from "../accounts";
import { createOperator } from "../operators";
import { parseLimitName, reportLimits, setLimit } from "../limits";
import {
  addPhoneNumber,
  listPhoneNumbers,
  type PhoneNumber,
  removePhoneNumber,
  setDefaultPhoneNumber,
} from "../mapper";
import { refoldLog } from "../usage";
import {
  createEndpoint,
  deleteEndpoint,
  type EndpointCreate,
  type EndpointUpdate,
  listEndpoints,
  redactedUrl,
  replay,
  rotateSecret,
  updateEndpoint,
} from "../webhooks";
import { type Caller, recordAfter } from "../audit";

const iso = (date: Date | null) => date?.toISOString() ?? null;

export async function accountsReport() {
  const accounts = await listAccounts();
  return accounts.map((account) => ({
    id: account.id,
    name: account.name,
    created_at: account.createdAt.toISOString(),
    signing_algorithm: account.signingAlgorithm,
    jitsi_domain: account.jitsiDomain,
    keys: account.apiKeys.map((key) => ({
      id: key.id,
      label: key.label,
      prefix: key.prefix,
      created_at: key.createdAt.toISOString(),
      revoked_at: iso(key.revokedAt),
    })),
    signing_keys: account.signingKeys.map((key) => ({
      kid: key.kid,
      algorithm: key.algorithm,
      created_at: key.createdAt.toISOString(),
      retired_at: iso(key.retiredAt),
      verify_until: iso(key.verifyUntil),
    })),
  }));
}

export async function adminCreateAccount(caller: Caller, name: string, algorithm: SigningAlgorithm | undefined) {
  const { account, apiKey, kid } = await createAccount(name, algorithm);
  await recordAfter(caller, {
    action: "create-account",
    target: account.id,
    detail: { name, signing_algorithm: account.signingAlgorithm, kid, key_id: apiKey.id, key_prefix: apiKey.prefix },
  });
  return {
    account: { id: account.id, name: account.name, signing_algorithm: account.signingAlgorithm },
    api_key: apiKey.apiKey,
    key_id: apiKey.id,
    kid,
  };
}

export async function adminCreateKey(caller: Caller, accountId: string, label: string) {
  const key = await createApiKey(accountId, label);
  await recordAfter(caller, {
    action: "create-key",
    target: accountId,
    detail: { key_id: key.id, key_prefix: key.prefix, label },
  });
  return { key_id: key.id, api_key: key.apiKey, prefix: key.prefix };
}

export async function adminRevokeKey(caller: Caller, keyId: number) {
  await revokeApiKey(keyId);
  await recordAfter(caller, { action: "revoke-key", target: `key:${keyId}` });
  return { revoked: true as const, key_id: keyId };
}

export async function adminRotateSigningKey(
  caller: Caller,
  accountId: string,
  algorithm: SigningAlgorithm | undefined,
) {
  const kid = await rotateSigningKey(accountId, algorithm);
  await recordAfter(caller, {
    action: "rotate-key",
    target: accountId,
    detail: { kid, ...(algorithm && { algorithm }) },
  });
  return { account_id: accountId, kid };
}

export async function adminRevokeSigningKey(caller: Caller, kid: string) {
  const { accountId, newKid } = await revokeSigningKey(kid);
  await recordAfter(caller, {
    action: "revoke-signing-key",
    target: accountId,
    detail: { kid, ...(newKid && { new_kid: newKid }) },
  });
  return { revoked: true as const, account_id: accountId, kid, new_kid: newKid ?? null };
}

export async function adminSetJitsiDomain(caller: Caller, accountId: string, domain: string) {
  const account = await setJitsiDomain(accountId, domain);
  await recordAfter(caller, {
    action: "set-jitsi-domain",
    target: accountId,
    detail: { jitsi_domain: account.jitsiDomain },
  });
  return { account_id: account.id, jitsi_domain: account.jitsiDomain };
}

function numberView(number: PhoneNumber & { accountId?: string }, accountId: string) {
  return {
    id: number.id,
    account_id: number.accountId ?? accountId,
    country_code: number.countryCode,
    formatted_number: number.formattedNumber,
    toll_free: number.tollFree,
    is_default: number.isDefault,
  };
}

export async function adminListNumbers(accountId: string) {
  const account = await getAccount(accountId);
  return (await listPhoneNumbers(account.id)).map((number) => numberView(number, account.id));
}

export async function adminAddNumber(
  caller: Caller,
  accountId: string,
  input: { country: string; number: string; toll_free?: boolean; default?: boolean },
) {
  const account = await getAccount(accountId);
  const number = await addPhoneNumber(account.id, {
    countryCode: input.country,
    formattedNumber: input.number,
    tollFree: input.toll_free === true,
    isDefault: input.default === true,
  });
  const view = numberView(number, account.id);
  await recordAfter(caller, {
    action: "add-number",
    target: account.id,
    detail: {
      number_id: view.id,
      country_code: view.country_code,
      formatted_number: view.formatted_number,
      toll_free: view.toll_free,
      is_default: view.is_default,
    },
  });
  return view;
}

export async function adminSetDefaultNumber(caller: Caller, numberId: number) {
  const number = await setDefaultPhoneNumber(numberId);
  await recordAfter(caller, {
    action: "set-default-number",
    target: number.accountId,
    detail: { number_id: number.id },
  });
  return numberView(number, number.accountId);
}

export async function adminRemoveNumber(caller: Caller, numberId: number) {
  const number = await removePhoneNumber(numberId);
  await recordAfter(caller, {
    action: "remove-number",
    target: number.accountId,
    detail: { number_id: number.id, formatted_number: number.formattedNumber },
  });
  return { removed: true as const, ...numberView(number, number.accountId) };
}

/** Every limit with the same members: `used` is null for those not counted in the database. */
export async function adminLimits(accountId: string) {
  const limits = await reportLimits(accountId);
  return { account_id: accountId, limits: limits.map((limit) => ({ ...limit, used: limit.used ?? null })) };
}

export async function adminSetLimit(caller: Caller, accountId: string, name: string, value: number | "default") {
  const limit = parseLimitName(name);
  await setLimit(accountId, limit, value === "default" ? null : value);
  await recordAfter(caller, { action: "set-limit", target: accountId, detail: { name: limit, value } });
  return adminLimits(accountId);
}

export async function adminCreateOperator(caller: Caller, name: string, password: string) {
  const operator = await createOperator(name, password);
  await recordAfter(caller, {
    action: "create-operator",
    target: `operator:${operator.id}`,
    detail: { name: operator.name },
  });
  return operator;
}

/** An operator token that may only read sees each URL redacted: the path and query may hold the receiver's token. */
export async function adminListWebhooks(caller: Caller, accountId: string) {
  const endpoints = await listEndpoints((await getAccount(accountId)).id);
  if (caller.operator.scope === "full") return endpoints;
  return endpoints.map((endpoint) => ({ ...endpoint, url: redactedUrl(endpoint.url) }));
}

export async function adminAddWebhook(caller: Caller, accountId: string, input: EndpointCreate) {
  const account = await getAccount(accountId);
  const created = await createEndpoint(account.id, input);
  await recordAfter(caller, {
    action: "add-webhook",
    target: account.id,
    detail: {
      webhook_id: created.endpoint.id,
      url: redactedUrl(created.endpoint.url),
      event_types: created.endpoint.event_types,
      ordered: created.endpoint.ordered,
    },
  });
  return created;
}

export async function adminUpdateWebhook(caller: Caller, accountId: string, webhookId: string, input: EndpointUpdate) {
  const endpoint = await updateEndpoint(accountId, webhookId, input);
  await recordAfter(caller, {
    action: "update-webhook",
    target: accountId,
    detail: { webhook_id: webhookId, ...input, ...(input.url !== undefined && { url: redactedUrl(endpoint.url) }) },
  });
  return endpoint;
}

export async function adminRotateWebhookSecret(caller: Caller, accountId: string, webhookId: string) {
  const rotated = await rotateSecret(accountId, webhookId);
  await recordAfter(caller, { action: "rotate-webhook-secret", target: accountId, detail: { webhook_id: webhookId } });
  return rotated;
}

export async function adminReplayWebhook(
  caller: Caller,
  accountId: string,
  webhookId: string,
  from: { since?: string; after?: number },
) {
  const queued = await replay(accountId, webhookId, from);
  await recordAfter(caller, {
    action: "replay-webhook",
    target: accountId,
    detail: { webhook_id: webhookId, ...from, queued },
  });
  return { queued };
}

export async function adminRemoveWebhook(caller: Caller, accountId: string, webhookId: string) {
  await deleteEndpoint(accountId, webhookId);
  await recordAfter(caller, { action: "remove-webhook", target: accountId, detail: { webhook_id: webhookId } });
  return { removed: true as const, webhook_id: webhookId };
}

/** Folds the event log again, for every account or one; answers when done. */
export async function adminRefold(caller: Caller, accountId: string | undefined) {
  if (accountId !== undefined) await getAccount(accountId);
  const started = performance.now();
  const events = await refoldLog({ accountId });
  const ms = Math.round(performance.now() - started);
  await recordAfter(caller, { action: "refold-usage", target: accountId ?? null, detail: { events, ms } });
  return { events, ms };
}
