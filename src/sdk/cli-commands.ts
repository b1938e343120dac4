/**
 * `parley`'s operator commands, each an admin API call and its answer as JSON and as text.
 * Apart from the command line's parsing and its target (cli.ts): adding a command touches
 * only this file and the usage text.
 */
import { algorithm, limits, need, type Options, readPassword, types, UsageError, whole } from "./cli-arguments.js";
import type { Parley } from "./client.js";

/** A command: `invocation` is how the user runs this command line, for the commands its answers suggest. */
export type Command = (
  parley: Parley,
  args: string[],
  options: Options,
  invocation: string,
) => Promise<{ json: unknown; text: string }>;

const date = (value: string | null | undefined) => value ?? "-";

export const COMMANDS: Record<string, Command> = {
  async "create-account"(parley, [name], options) {
    const created = await parley.admin.createAccount({ name: need(name, "<name>"), alg: algorithm(options.alg) });
    return {
      json: created,
      text: [
        `account   ${created.account.id} (${created.account.name})`,
        `signing   ${created.account.signing_algorithm}, kid ${created.kid}`,
        `api key   ${created.api_key}`,
        "Keep the API key now: it is stored only as a hash and cannot be shown again.",
      ].join("\n"),
    };
  },
  async "list-accounts"(parley) {
    const { accounts } = await parley.admin.listAccounts();
    const lines = accounts.flatMap((account) => [
      `${account.id}  ${account.name}  ${account.signing_algorithm}  jitsi ` +
        `domain ${account.jitsi_domain}  created ${account.created_at}`,
      ...account.keys.map((key) => {
        const state = key.revoked_at ? `revoked ${key.revoked_at}` : "active";
        return `  api key #${key.id}  ${key.prefix}…  ${key.label || "-"}  ${state}`;
      }),
      ...account.signing_keys.map((key) => {
        const state = !key.retired_at
          ? "current"
          : key.verify_until && key.verify_until <= key.retired_at
            ? `revoked ${key.verify_until}`
            : `retired, verifies until ${date(key.verify_until)}`;
        return `  signing ${key.kid}  ${key.algorithm}  ${state}`;
      }),
    ]);
    return { json: accounts, text: lines.length > 0 ? lines.join("\n") : "no accounts" };
  },
  async "create-key"(parley, [accountId], options) {
    const key = await parley.admin.createKey(need(accountId, "<account-id>"), {
      label: options.label as string | undefined,
    });
    return {
      json: key,
      text:
        `api key #${key.key_id}   ${key.api_key}\nKeep the API key ` +
        "now: it is stored only as a hash and cannot be shown again.",
    };
  },
  async "revoke-key"(parley, [keyId]) {
    const revoked = await parley.admin.revokeKey(whole(keyId, "<key-id>"));
    return { json: revoked, text: `api key #${revoked.key_id} revoked` };
  },
  async "rotate-key"(parley, [accountId], options) {
    const rotated = await parley.admin.rotateSigningKey(need(accountId, "<account-id>"), {
      alg: algorithm(options.alg),
    });
    return {
      json: rotated,
      text: `new signing key ${rotated.kid}; earlier keys keep verifying until their tokens expire`,
    };
  },
  async "revoke-signing-key"(parley, [kid]) {
    const revoked = await parley.admin.revokeSigningKey(need(kid, "<kid>"));
    return {
      json: revoked,
      text:
        `signing key ${revoked.kid} of ${revoked.account_id} ` +
        `revoked${revoked.new_kid ? `; new current key ${revoked.new_kid}` : ""}`,
    };
  },
  async "set-jitsi-domain"(parley, [accountId, domain]) {
    const set = await parley.admin.setJitsiDomain(need(accountId, "<account-id>"), need(domain, "<domain|*>"));
    return { json: set, text: `media tokens of ${set.account_id} now carry sub ${set.jitsi_domain}` };
  },
  async "add-number"(parley, [accountId, country, number], options) {
    const added = await parley.admin.addNumber(need(accountId, "<account-id>"), {
      country: need(country, "<country>"),
      number: need(number, "<number>"),
      toll_free: options["toll-free"] === true,
      default: options.default === true,
    });
    return { json: added, text: `number #${added.id}   ${describeNumber(added)}` };
  },
  async "set-default-number"(parley, [numberId]) {
    const number = await parley.admin.setDefaultNumber(whole(numberId, "<number-id>"));
    return {
      json: number,
      text: `number #${number.id} (${number.formatted_number}) is now the default of account ${number.account_id}`,
    };
  },
  async "list-numbers"(parley, [accountId]) {
    const { numbers } = await parley.admin.listNumbers(need(accountId, "<account-id>"));
    return {
      json: numbers,
      text:
        numbers.length > 0
          ? numbers.map((number) => `#${number.id}  ${describeNumber(number)}`).join("\n")
          : "no numbers",
    };
  },
  async "remove-number"(parley, [numberId]) {
    const removed = await parley.admin.removeNumber(whole(numberId, "<number-id>"));
    return {
      json: removed,
      text: `number #${removed.id} (${removed.formatted_number}) removed from account ${removed.account_id}`,
    };
  },
  async "show-limits"(parley, [accountId]) {
    const report = await parley.admin.limits(need(accountId, "<account-id>"));
    return { json: report, text: report.limits.map(describeLimit).join("\n") };
  },
  async "set-limit"(parley, [accountId, name, value]) {
    const raw = need(value, "<value>");
    const parsed = raw === "default" ? "default" : whole(raw, "<value>");
    const report = await parley.admin.setLimit(need(accountId, "<account-id>"), need(name, "<name>"), parsed);
    return { json: report, text: parsed === "default" ? `${name} is back to its default` : `${name} set to ${parsed}` };
  },
  async "create-operator"(parley, [name]) {
    const operatorName = need(name, "<name>");
    const created = await parley.admin.createOperator({ name: operatorName, password: await readPassword() });
    return { json: created, text: `operator #${created.id} ${created.name}: sign in at /console` };
  },
  async "create-operator-token"(parley, [name], options) {
    const created = await parley.admin.createOperatorToken({
      name: need(name, "<name>"),
      scope: options["read-only"] === true ? "read" : "full",
    });
    return {
      json: created,
      text:
        `operator token #${created.id} ${created.name} (${created.scope})\ntoken   ${created.token}\nKeep ` +
        "the token now: it is stored only as a hash and cannot be shown again.",
    };
  },
  async "list-operator-tokens"(parley) {
    const { tokens } = await parley.admin.listOperatorTokens();
    const lines = tokens.map(
      (token) =>
        `#${token.id}  ${token.name}  ${token.scope}  ${token.prefix}…  by ${token.created_by}  last ` +
        `used ${date(token.last_used_at)}  ${token.revoked_at ? `revoked ${token.revoked_at}` : "active"}`,
    );
    return { json: tokens, text: lines.length > 0 ? lines.join("\n") : "no operator tokens" };
  },
  async "revoke-operator-token"(parley, [id]) {
    const revoked = await parley.admin.revokeOperatorToken(whole(id, "<id>"));
    return { json: revoked, text: `operator token #${revoked.id} revoked` };
  },
  async audit(parley, _args, options, invocation) {
    const page = await parley.admin.audit({
      limit: options.limit === undefined ? undefined : whole(options.limit as string, "--limit"),
      before: options.before === undefined ? undefined : whole(options.before as string, "--before"),
    });
    const lines = page.entries.map(
      (entry) =>
        `#${entry.id}  ${entry.at}  ${entry.actor} ` +
        `(${entry.actor_kind})  ${entry.action}  ${entry.target ?? "-"}  from ${entry.address}`,
    );
    if (page.next_before !== null) lines.push(`older: ${invocation} audit --before ${page.next_before}`);
    return { json: page, text: page.entries.length > 0 ? lines.join("\n") : "no changes recorded" };
  },
  async "add-webhook"(parley, [accountId, url], options) {
    const created = await parley.admin.addWebhook(need(accountId, "<account-id>"), {
      url: need(url, "<url>"),
      event_types: types(options.types),
      description: options.description as string | undefined,
      ordered: options.ordered === true,
      ...limits(options),
    });
    return {
      json: created,
      text:
        `webhook   ${created.endpoint.id}  ${created.endpoint.url}\nsecret    ${created.secret}\nKeep ` +
        "the secret now: it cannot be shown again (rotate-webhook-secret makes a new one).",
    };
  },
  async "list-webhooks"(parley, [accountId]) {
    const { webhooks } = await parley.admin.listWebhooks(need(accountId, "<account-id>"));
    const lines = webhooks.map((endpoint) => {
      const state = endpoint.enabled
        ? "enabled"
        : `disabled${endpoint.disabled_reason ? ` (${endpoint.disabled_reason})` : ""}`;
      const events = endpoint.event_types?.join(",") ?? "all events";
      const limits =
        (endpoint.rate_per_second === null ? "" : `  ${endpoint.rate_per_second}/s`) +
        (endpoint.max_in_flight === null ? "" : `  ${endpoint.max_in_flight} in flight`);
      return `${endpoint.id}  ${endpoint.url}  ${events}  ${state}${endpoint.ordered ? "  ordered" : ""}${limits}`;
    });
    return { json: webhooks, text: lines.length > 0 ? lines.join("\n") : "no webhooks" };
  },
  async "update-webhook"(parley, [accountId, webhookId], options) {
    const endpoint = await parley.admin.updateWebhook(
      need(accountId, "<account-id>"),
      need(webhookId, "<webhook-id>"),
      {
        url: options.url as string | undefined,
        event_types: types(options.types),
        description: options.description as string | undefined,
        enabled: options.enable === true ? true : options.disable === true ? false : undefined,
        ordered: options.ordered === true ? true : options.unordered === true ? false : undefined,
        ...limits(options),
      },
    );
    return {
      json: endpoint,
      text: `webhook ${endpoint.id} updated: ${endpoint.url}, ${endpoint.enabled ? "enabled" : "disabled"}`,
    };
  },
  async "rotate-webhook-secret"(parley, [accountId, webhookId]) {
    const rotated = await parley.admin.rotateWebhookSecret(
      need(accountId, "<account-id>"),
      need(webhookId, "<webhook-id>"),
    );
    return {
      json: rotated,
      text:
        `webhook   ${rotated.endpoint.id}\nsecret    ${rotated.secret}\nThe ` +
        "old secret keeps signing beside this one for 24 hours.",
    };
  },
  async "replay-webhook"(parley, [accountId, webhookId], options) {
    const after = options.after === undefined ? undefined : whole(options.after as string, "--after");
    if ((options.since === undefined) === (after === undefined))
      throw new UsageError("give --since <time> or --after <sequence>");
    const replayed = await parley.admin.replayWebhook(
      need(accountId, "<account-id>"),
      need(webhookId, "<webhook-id>"),
      {
        since: options.since as string | undefined,
        after,
      },
    );
    return { json: replayed, text: `${replayed.queued} deliveries queued` };
  },
  async "remove-webhook"(parley, [accountId, webhookId]) {
    const removed = await parley.admin.removeWebhook(need(accountId, "<account-id>"), need(webhookId, "<webhook-id>"));
    return { json: removed, text: `webhook ${removed.webhook_id} removed` };
  },
  async "refold-usage"(parley, [accountId]) {
    const folded = await parley.admin.refoldUsage(accountId === undefined ? {} : { account_id: accountId });
    return { json: folded, text: `folded ${folded.events} events again in ${(Number(folded.ms) / 1000).toFixed(1)} s` };
  },
};

function describeNumber(number: {
  country_code: string;
  formatted_number: string;
  toll_free: boolean;
  is_default: boolean;
}): string {
  const flags = `${number.toll_free ? "  toll-free" : ""}${number.is_default ? "  default" : ""}`;
  return `${number.country_code}  ${number.formatted_number}${flags}`;
}

function describeLimit(limit: {
  name: string;
  value: number;
  default: number;
  overridden: boolean;
  per: string;
  used?: number | null;
}): string {
  const source = limit.overridden ? `set (default ${limit.default})` : "default";
  const used = limit.used === undefined || limit.used === null ? "" : `  used ${limit.used}`;
  return `${limit.name.padEnd(22)} ${String(limit.value).padStart(12)}  ${limit.per.padEnd(28)} ${source}${used}`;
}
