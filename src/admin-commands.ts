/**
 * The operator's commands on the database directly (`npm run admin`, src/admin.ts), each on
 * the services it names. `npm run parley` (src/parley.ts) is the command line operators use:
 * it sends the same commands to the admin API, which writes the audit log.
 */
import { parseArgs } from "node:util";
import { SIGNING_ALGORITHMS, type SigningAlgorithm } from "./config";
import { database } from "./db/client";
import { migrate } from "./db/migrate";
import { sealSecretsAtRest } from "./sealed-at-rest";
import { AppError } from "./core/errors";
import {
  createAccount,
  createApiKey,
  getAccount,
  listAccounts,
  revokeApiKey,
  revokeSigningKey,
  rotateSigningKey,
  setJitsiDomain,
} from "./modules/accounts/service";
import {
  addPhoneNumber,
  listPhoneNumbers,
  type PhoneNumber,
  removePhoneNumber,
  setDefaultPhoneNumber,
} from "./modules/mapper/service";
import { parseLimitName, reportLimits, setLimit } from "./modules/limits/service";
import { createOperator } from "./modules/operators/service";
import { refoldLog } from "./modules/usage/fold";
import {
  createEndpoint,
  deleteEndpoint,
  listEndpoints,
  parseTypes,
  replay,
  rotateSecret,
  updateEndpoint,
} from "./modules/webhooks/service";
import { closeRedis } from "./queue/connection";
import { terminalSafe } from "./sdk/terminal";

const USAGE = `usage: npm run admin <command> [options]

These run on the database directly, and leave no audit entry. \`npm run parley -- …\` takes
the same commands through the admin API: the running Parley's, or with none running one of
its own for the command, with --json on every command and an audit entry for each change
(docs/cli.md).

  create-account <name> [--alg RS256|ES256|EdDSA]   make an account; prints its API key once
  list-accounts [--json]                            accounts with their keys (never the secrets)
  create-key <account-id> [--label text]            another API key for the account; printed once
  revoke-key <key-id>                               the key stops working at once, on every process
  rotate-key <account-id> [--alg RS256|ES256|EdDSA] new signing key; the old kid verifies until its tokens expire
  revoke-signing-key <kid>                          tokens of that key stop verifying at once, and Jitsi
                                                    can no longer fetch it; a current key is replaced
  set-jitsi-domain <account-id> <domain|*>          the sub of the account's media tokens: the Jitsi
                                                    domain (meet.example.com) or tenant; * for any
  add-number <account-id> <country> <number> [--toll-free] [--default]
                                                    a dial-in number (country: ISO code such as US)
  set-default-number <number-id>                    the number jitsi-meet shows first
  list-numbers <account-id> [--json]                the account's dial-in numbers with their ids
  remove-number <number-id>                         stop listing a dial-in number
  show-limits <account-id> [--json]                 the account's limits, defaults and overrides (docs/limits.md)
  set-limit <account-id> <name> <value|default>     change one limit of the account; applies on every process at once
  create-operator <name>                            a console operator (sees every account); the
                                                    password is read from stdin, or asked for
  add-webhook <account-id> <url> [--types a,b] [--description text] [--ordered]
                                                    a webhook endpoint (every event type unless --types);
                                                    prints its secret once
  list-webhooks <account-id> [--json]               the account's webhook endpoints
  update-webhook <account-id> <webhook-id> [--url u] [--types a,b|all] [--description text]
                 [--enable|--disable] [--ordered|--unordered]
  rotate-webhook-secret <account-id> <webhook-id>   new secret, printed once; the old one signs beside it for 24 hours
  replay-webhook <account-id> <webhook-id> (--since time | --after sequence)
                                                    send the kept events again to the endpoint
  remove-webhook <account-id> <webhook-id>          delete the endpoint and its delivery log
  refold-usage [<account-id>]                       fold the event log again into the usage tables (every
                                                    account, or one): after restoring events, or to repair
                                                    usage (docs/usage.md)`;

class UsageError extends Error {}

/** The password from piped stdin (first line), or asked for on the terminal without echo. */
/** One line of plain output: a stored name, label or URL stays on its line and cannot steer the terminal. */
const print = (line = "") => console.log(terminalSafe(line));

async function readPassword(): Promise<string> {
  if (!process.stdin.isTTY) return (await Bun.stdin.text()).split(/\r?\n/)[0] ?? "";
  const stty = (mode: string) => Bun.spawnSync(["stty", mode], { stdin: "inherit" });
  stty("-echo");
  try {
    return prompt("password:") ?? "";
  } finally {
    stty("echo");
    print();
  }
}

function algorithmOption(value: string | undefined): SigningAlgorithm | undefined {
  if (value === undefined) return undefined;
  if (!(SIGNING_ALGORITHMS as readonly string[]).includes(value)) {
    throw new UsageError(`--alg must be one of ${SIGNING_ALGORITHMS.join(", ")}`);
  }
  return value as SigningAlgorithm;
}

function describeNumber(number: PhoneNumber): string {
  const flags = `${number.tollFree ? "  toll-free" : ""}${number.isDefault ? "  default" : ""}`;
  return `${number.countryCode}  ${number.formattedNumber}${flags}`;
}

function need(value: string | undefined, what: string): string {
  if (!value) throw new UsageError(`missing ${what}`);
  return value;
}

const COMMANDS: Record<
  string,
  (args: string[], options: Record<string, string | boolean | undefined>) => Promise<void>
> = {
  async "create-account"([name], options) {
    const { account, apiKey, kid } = await createAccount(
      need(name, "<name>"),
      algorithmOption(options.alg as string | undefined),
    );
    print(`account   ${account.id} (${account.name})`);
    print(`signing   ${account.signingAlgorithm}, kid ${kid}`);
    print(`api key   ${apiKey.apiKey}`);
    print("Keep the API key now: it is stored only as a hash and cannot be shown again.");
  },
  async "list-accounts"(_args, options) {
    const rows = await listAccounts();
    if (options.json) {
      console.log(JSON.stringify(rows, null, 2));
      return;
    }
    for (const account of rows) {
      print(
        `${account.id}  ${account.name}  ${account.signingAlgorithm}  jitsi ` +
          `domain ${account.jitsiDomain}  created ${account.createdAt.toISOString()}`,
      );
      for (const key of account.apiKeys) {
        const state = key.revokedAt ? `revoked ${key.revokedAt.toISOString()}` : "active";
        print(`  api key #${key.id}  ${key.prefix}…  ${key.label || "-"}  ${state}`);
      }
      for (const key of account.signingKeys) {
        const state = !key.retiredAt
          ? "current"
          : key.verifyUntil && key.verifyUntil <= key.retiredAt
            ? `revoked ${key.verifyUntil.toISOString()}`
            : `retired, verifies until ${key.verifyUntil?.toISOString()}`;
        print(`  signing ${key.kid}  ${key.algorithm}  ${state}`);
      }
    }
    if (rows.length === 0) print("no accounts");
  },
  async "create-key"([accountId], options) {
    const key = await createApiKey(need(accountId, "<account-id>"), (options.label as string | undefined) ?? "");
    print(`api key #${key.id}   ${key.apiKey}`);
    print("Keep the API key now: it is stored only as a hash and cannot be shown again.");
  },
  async "revoke-key"([keyId]) {
    const id = Number(need(keyId, "<key-id>"));
    if (!Number.isInteger(id)) throw new UsageError("<key-id> is the number shown by list-accounts");
    await revokeApiKey(id);
    print(`api key #${id} revoked`);
  },
  async "rotate-key"([accountId], options) {
    const kid = await rotateSigningKey(
      need(accountId, "<account-id>"),
      algorithmOption(options.alg as string | undefined),
    );
    print(`new signing key ${kid}; earlier keys keep verifying until their tokens expire`);
  },
  async "revoke-signing-key"([kid]) {
    const { accountId, newKid } = await revokeSigningKey(need(kid, "<kid>"));
    print(`signing key ${kid} of ${accountId} revoked${newKid ? `; new current key ${newKid}` : ""}`);
  },
  async "set-jitsi-domain"([accountId, domain]) {
    const account = await setJitsiDomain(need(accountId, "<account-id>"), need(domain, "<domain|*>"));
    print(`media tokens of ${account.id} now carry sub ${account.jitsiDomain}`);
  },
  async "add-number"([accountId, countryCode, formattedNumber], options) {
    const account = await getAccount(need(accountId, "<account-id>"));
    const number = await addPhoneNumber(account.id, {
      countryCode: need(countryCode, "<country>"),
      formattedNumber: need(formattedNumber, "<number>"),
      tollFree: options["toll-free"] === true,
      isDefault: options.default === true,
    });
    print(`number #${number.id}   ${describeNumber(number)}`);
  },
  async "set-default-number"([numberId]) {
    const id = Number(need(numberId, "<number-id>"));
    if (!Number.isInteger(id)) throw new UsageError("<number-id> is the number shown by list-numbers");
    const number = await setDefaultPhoneNumber(id);
    print(`number #${number.id} (${number.formattedNumber}) is now the default of account ${number.accountId}`);
  },
  async "list-numbers"([accountId], options) {
    const account = await getAccount(need(accountId, "<account-id>"));
    const numbers = await listPhoneNumbers(account.id);
    if (options.json) {
      console.log(JSON.stringify(numbers, null, 2));
      return;
    }
    for (const number of numbers) {
      print(`#${number.id}  ${describeNumber(number)}`);
    }
    if (numbers.length === 0) print("no numbers");
  },
  async "create-operator"([name]) {
    const operator = await createOperator(need(name, "<name>"), await readPassword());
    print(`operator #${operator.id} ${operator.name}: sign in at /console`);
  },
  async "remove-number"([numberId]) {
    const id = Number(need(numberId, "<number-id>"));
    if (!Number.isInteger(id)) throw new UsageError("<number-id> is the number shown by list-numbers");
    const removed = await removePhoneNumber(id);
    print(`number #${removed.id} (${removed.formattedNumber}) removed from account ${removed.accountId}`);
  },
  async "show-limits"([accountId], options) {
    const limits = await reportLimits(need(accountId, "<account-id>"));
    if (options.json) {
      console.log(JSON.stringify(limits, null, 2));
      return;
    }
    for (const limit of limits) {
      const source = limit.overridden ? `set (default ${limit.default})` : "default";
      const used = limit.used === undefined ? "" : `  used ${limit.used}`;
      print(`${limit.name.padEnd(22)} ${String(limit.value).padStart(12)}  ${limit.per.padEnd(28)} ${source}${used}`);
    }
  },
  async "set-limit"([accountId, name, value]) {
    const limit = parseLimitName(need(name, "<name>"));
    const raw = need(value, "<value>");
    const parsed = raw === "default" ? null : Number(raw);
    if (parsed !== null && !(Number.isSafeInteger(parsed) && parsed >= 0))
      throw new UsageError("<value> is a whole number of at least 0, or default");
    await setLimit(need(accountId, "<account-id>"), limit, parsed);
    print(parsed === null ? `${limit} is back to its default` : `${limit} set to ${parsed}`);
  },
  async "refold-usage"([accountId]) {
    if (accountId !== undefined) await getAccount(accountId);
    const started = performance.now();
    const folded = await refoldLog({ accountId });
    print(`folded ${folded} events again in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  },
};

function typesOption(value: string | boolean | undefined) {
  if (value === undefined) return undefined;
  if (value === "all") return null;
  const types = parseTypes(String(value));
  if (!types) throw new UsageError("--types needs a comma-separated list of event types, or all");
  return types;
}

const WEBHOOK_COMMANDS: typeof COMMANDS = {
  async "add-webhook"([accountId, url], options) {
    const account = await getAccount(need(accountId, "<account-id>"));
    const { endpoint, secret } = await createEndpoint(account.id, {
      url: need(url, "<url>"),
      event_types: typesOption(options.types),
      description: options.description as string | undefined,
      ordered: options.ordered === true,
    });
    print(`webhook   ${endpoint.id}  ${endpoint.url}`);
    print(`secret    ${secret}`);
    print("Keep the secret now: it cannot be shown again (rotate-webhook-secret makes a new one).");
  },
  async "list-webhooks"([accountId], options) {
    const endpoints = await listEndpoints((await getAccount(need(accountId, "<account-id>"))).id);
    if (options.json) {
      console.log(JSON.stringify(endpoints, null, 2));
      return;
    }
    for (const endpoint of endpoints) {
      const state = endpoint.enabled
        ? "enabled"
        : `disabled${endpoint.disabled_reason ? ` (${endpoint.disabled_reason})` : ""}`;
      const events = endpoint.event_types?.join(",") ?? "all events";
      print(`${endpoint.id}  ${endpoint.url}  ${events}  ${state}${endpoint.ordered ? "  ordered" : ""}`);
    }
    if (endpoints.length === 0) print("no webhooks");
  },
  async "update-webhook"([accountId, webhookId], options) {
    const endpoint = await updateEndpoint(need(accountId, "<account-id>"), need(webhookId, "<webhook-id>"), {
      url: options.url as string | undefined,
      event_types: typesOption(options.types),
      description: options.description as string | undefined,
      enabled: options.enable === true ? true : options.disable === true ? false : undefined,
      ordered: options.ordered === true ? true : options.unordered === true ? false : undefined,
    });
    print(`webhook ${endpoint.id} updated: ${endpoint.url}, ${endpoint.enabled ? "enabled" : "disabled"}`);
  },
  async "rotate-webhook-secret"([accountId, webhookId]) {
    const { endpoint, secret } = await rotateSecret(need(accountId, "<account-id>"), need(webhookId, "<webhook-id>"));
    print(`webhook   ${endpoint.id}`);
    print(`secret    ${secret}`);
    print("The old secret keeps signing beside this one for 24 hours.");
  },
  async "replay-webhook"([accountId, webhookId], options) {
    const after = options.after === undefined ? undefined : Number(options.after);
    if (after !== undefined && !Number.isInteger(after)) throw new UsageError("--after is an event's sequence number");
    if ((options.since === undefined) === (after === undefined))
      throw new UsageError("give --since <time> or --after <sequence>");
    const queued = await replay(need(accountId, "<account-id>"), need(webhookId, "<webhook-id>"), {
      since: options.since as string | undefined,
      after,
    });
    print(`${queued} deliveries queued`);
  },
  async "remove-webhook"([accountId, webhookId]) {
    await deleteEndpoint(need(accountId, "<account-id>"), need(webhookId, "<webhook-id>"));
    print(`webhook ${webhookId} removed`);
  },
};
Object.assign(COMMANDS, WEBHOOK_COMMANDS);

/** Runs one command line; the exit code: 0 done, 1 the command failed, 2 the command was misused. */
export async function runAdmin(argv: string[]): Promise<number> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      alg: { type: "string" },
      label: { type: "string" },
      json: { type: "boolean" },
      "toll-free": { type: "boolean" },
      default: { type: "boolean" },
      types: { type: "string" },
      description: { type: "string" },
      url: { type: "string" },
      since: { type: "string" },
      after: { type: "string" },
      ordered: { type: "boolean" },
      unordered: { type: "boolean" },
      enable: { type: "boolean" },
      disable: { type: "boolean" },
      help: { type: "boolean" },
    },
    strict: false,
  });
  const [command, ...args] = positionals;
  if (!command || values.help) {
    console.log(USAGE);
    return command ? 0 : 2;
  }
  const run = COMMANDS[command];
  if (!run) {
    console.error(`unknown command "${command}"\n\n${USAGE}`);
    return 2;
  }
  try {
    await migrate();
    await sealSecretsAtRest();
    await run(args, values);
    return 0;
  } catch (error) {
    if (error instanceof UsageError) {
      console.error(`${error.message}\n\n${USAGE}`);
      return 2;
    }
    if (error instanceof AppError) {
      console.error(`error: ${terminalSafe(error.message)}`);
      return 1;
    }
    throw error;
  } finally {
    await closeRedis();
    await database.close();
  }
}
