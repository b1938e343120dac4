/**
 * The `parley` command line: the operator's commands on a running Parley, through its admin
 * API. Locally it needs no credential: it speaks over DATA_DIR/parley.sock; remotely it takes
 * PARLEY_URL and an operator token in PARLEY_TOKEN. Runs on Node ≥ 20 (docs/cli.md).
 */
import { resolve } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { Parley } from "./client.js";
import { loadTestCommand } from "./load-test-command.js";
import { ParleyError } from "./errors.js";
import { terminalSafe, terminalSafeDeep } from "./terminal.js";
import { checkSocket, SocketProblem, unixSocketFetch } from "./unix-socket.js";

/** Exit codes: documented in the usage text and docs/cli.md. */
const EXIT = { done: 0, failed: 1, usage: 2, refused: 3, unreachable: 4, missed: 5 } as const;

const USAGE = `usage: parley <command> [arguments] [--json]

  create-account <name> [--alg RS256|ES256|EdDSA]   make an account; prints its API key once
  list-accounts                                     accounts with their keys (never the secrets)
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
  list-numbers <account-id>                         the account's dial-in numbers with their ids
  remove-number <number-id>                         stop listing a dial-in number
  show-limits <account-id>                          the account's limits, defaults and overrides (docs/limits.md)
  set-limit <account-id> <name> <value|default>     change one limit of the account; applies on every process at once
  create-operator <name>                            a console operator (sees every account); the
                                                    password (at least 8 characters) is read from
                                                    stdin, or asked for twice
  create-operator-token <name> [--read-only]        a token for scripts and remote use (PARLEY_TOKEN); printed once
  list-operator-tokens                              operator tokens (never the secrets)
  revoke-operator-token <id>                        the token stops working at once
  audit [--limit n] [--before id]                   the latest changes: who, what, when, from where
  add-webhook <account-id> <url> [--types a,b] [--description text] [--ordered]
              [--rate n/s] [--burst n] [--max-in-flight n]
                                                    a webhook endpoint (every event type unless --types);
                                                    prints its secret once
  list-webhooks <account-id>                        the account's webhook endpoints
  update-webhook <account-id> <webhook-id> [--url u] [--types a,b|all] [--description text]
                 [--enable|--disable] [--ordered|--unordered]
                 [--rate n/s|none] [--burst n|none] [--max-in-flight n|none]
                                                    limits hold across every worker; none lifts one
  rotate-webhook-secret <account-id> <webhook-id>   new secret, printed once; the old one signs beside it for 24 hours
  replay-webhook <account-id> <webhook-id> (--since time | --after sequence)
                                                    send the kept events again to the endpoint
  remove-webhook <account-id> <webhook-id>          delete the endpoint and its delivery log
  load-test --url <url> --key <api-key> [--duration 60s] [--rate token=20,chat=10,events=8]
            [--receivers 10] [--senders 2] [--stream <name|url> | --start-stream] [--viewers 5]
            [--sink-url <url> --sink-port n]
            [--objective part.metric<value]...
                                                    a mixed load (tokens, chat sockets, event_sync,
                                                    webhooks, LL-HLS viewers) on any Parley, by an
                                                    account's API key; exits 5 when an objective is missed
  refold-usage [<account-id>]                       fold the event log again into the usage tables (every
                                                    account, or one): after restoring events, or to repair usage;
                                                    it runs inside the running Parley, so it is safe while it serves

  --json    print the answer as JSON (every command)

Where it sends the command:
  PARLEY_URL set       to that Parley, with the operator token in PARLEY_TOKEN
  otherwise            to the Parley running on DATA_DIR (default ./data) through DATA_DIR/parley.sock
  neither answers      npm run parley (in Parley's repository) works on the database directly;
                       the installed parley says so and exits 4

Exit codes: 0 done, 1 Parley refused the command (unknown account, bad value), 2 misused,
3 the credential was refused, 4 no Parley to talk to, 5 a load test missed an objective.`;

class UsageError extends Error {
  constructor(
    message: string,
    /** Whether the usage helps: not for a password typed differently twice. */
    readonly showUsage = true,
  ) {
    super(message);
  }
}

/**
 * How many arguments each command takes, as USAGE lists them (`<…>`, optional ones too): a
 * stray one is misuse, not something to ignore (`list-accounts [--json]` copied with its brackets).
 */
const ARITY = new Map(
  USAGE.split("\n").flatMap((line) => {
    const listed = /^ {2}([a-z][a-z-]+)((?: \S+)*)/.exec(line);
    return listed ? [[listed[1]!, (listed[2]!.match(/</g) ?? []).length] as const] : [];
  }),
);

/** No running Parley could be reached: the launcher in the repository then works on the database itself. */
class NoParley extends Error {}

type Options = Record<string, string | boolean | undefined>;
type Print = (text: string) => void;
type Command = (parley: Parley, args: string[], options: Options) => Promise<{ json: unknown; text: string }>;

function need(value: string | undefined, what: string): string {
  if (!value) throw new UsageError(`missing ${what}`);
  return value;
}

function whole(value: string | undefined, what: string): number {
  const number = Number(need(value, what));
  if (!Number.isSafeInteger(number) || number < 0) throw new UsageError(`${what} is a whole number`);
  return number;
}

const ALGORITHMS = ["RS256", "ES256", "EdDSA"] as const;
type Algorithm = (typeof ALGORITHMS)[number];

function algorithm(value: string | boolean | undefined): Algorithm | undefined {
  if (value === undefined) return undefined;
  if (!ALGORITHMS.includes(value as Algorithm)) throw new UsageError(`--alg must be one of ${ALGORITHMS.join(", ")}`);
  return value as Algorithm;
}

function types(value: string | boolean | undefined) {
  if (value === undefined) return undefined;
  if (value === "all") return null;
  if (typeof value !== "string" || value.trim() === "")
    throw new UsageError("--types needs a comma-separated list of event types, or all");
  return value.split(",").map((type) => type.trim()) as never;
}

/** A webhook limit's option: a positive number (a whole one unless `fraction`), or none (null) to lift it. */
function limit(value: string | boolean | undefined, what: string, fraction = false): number | null | undefined {
  if (value === undefined) return undefined;
  if (value === "none") return null;
  const number = Number(value);
  if (typeof value !== "string" || !(number > 0) || (!fraction && !Number.isSafeInteger(number)))
    throw new UsageError(`${what} is a positive ${fraction ? "number" : "whole number"}, or none`);
  return number;
}

/** The limits an add-webhook or update-webhook sets; none given leaves them as they are. */
const limits = (options: Options) => ({
  rate_per_second: limit(options.rate, "--rate", true),
  rate_burst: limit(options.burst, "--burst"),
  max_in_flight: limit(options["max-in-flight"], "--max-in-flight"),
});

/** The shortest operator password the server takes (src/modules/operators/service.ts), said in the prompt. */
const PASSWORD_MIN_CHARS = 8;

/**
 * The password from piped stdin (first line), or asked for twice on the terminal without echo:
 * a typing mistake nobody saw would otherwise become the password.
 */
async function readPassword(): Promise<string> {
  if (!process.stdin.isTTY) {
    const chunks: Buffer[] = [];
    for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks).toString("utf8").split(/\r?\n/)[0] ?? "";
  }
  const terminal = createInterface({ input: process.stdin, output: process.stdout, terminal: true });
  // Nothing typed is echoed: readline writes through this, which writes nothing.
  (terminal as unknown as { _writeToOutput: (text: string) => void })._writeToOutput = () => {};
  // Lines typed ahead (both answers before the first prompt) wait in the iterator, where question() would lose them.
  const lines = terminal[Symbol.asyncIterator]();
  const ask = async (prompt: string) => {
    process.stdout.write(prompt);
    const line = await lines.next();
    process.stdout.write("\n");
    return line.done ? "" : line.value;
  };
  try {
    const password = await ask(`password (at least ${PASSWORD_MIN_CHARS} characters): `);
    if (password.length < PASSWORD_MIN_CHARS)
      throw new UsageError(
        `the password has ${password.length} characters; it needs at least ${PASSWORD_MIN_CHARS}`,
        false,
      );
    if ((await ask("the same password again: ")) !== password)
      throw new UsageError("the two passwords differ; no operator was made", false);
    return password;
  } finally {
    terminal.close();
  }
}

const date = (value: string | null | undefined) => value ?? "-";

/**
 * The client whose answers plain output is built from, every string in them terminalSafe:
 * a name is whatever was stored, and a line of output must stay one line.
 */
function printable(parley: Parley): Parley {
  const admin = new Proxy(parley.admin, {
    get(target, key) {
      const member = Reflect.get(target, key);
      if (typeof member !== "function") return member;
      return async (...args: unknown[]) => terminalSafeDeep(await member.apply(target, args));
    },
  });
  return { admin } as Parley;
}

const COMMANDS: Record<string, Command> = {
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
  async audit(parley, _args, options) {
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

/** The Parley this command goes to: PARLEY_URL with PARLEY_TOKEN, else the local socket of DATA_DIR. */
async function target(env: NodeJS.ProcessEnv): Promise<Parley> {
  const headers = { "user-agent": "parley-cli" };
  if (env.PARLEY_URL) {
    if (!env.PARLEY_TOKEN)
      throw new UsageError(
        "PARLEY_URL is set but PARLEY_TOKEN is not: give an operator token " +
          `(${invocation} create-operator-token <name>, run beside that Parley)`,
      );
    return new Parley({ baseUrl: env.PARLEY_URL, operatorToken: env.PARLEY_TOKEN, headers });
  }
  const path = resolve(env.DATA_DIR || "./data", "parley.sock");
  try {
    await checkSocket(path);
  } catch (error) {
    if (error instanceof SocketProblem && error.kind === "absent") {
      throw new NoParley(
        `no running Parley found: ${error.message} (set DATA_DIR to the data folder of ` +
          "the Parley on this machine, or PARLEY_URL and PARLEY_TOKEN for a remote one)",
      );
    }
    throw error;
  }
  // The host is never used: every request goes down the socket.
  return new Parley({ baseUrl: "http://localhost", fetch: unixSocketFetch(path), headers, retry: { retries: 0 } });
}

/** What a refused credential means for the one who typed the command. */
function credentialMessage(error: ParleyError): string {
  if (error.code === "operator_credential_required") {
    return (
      "PARLEY_TOKEN is not an operator token: an account's API key or token never " +
      `passes the admin API (make one with ${invocation} create-operator-token <name>)`
    );
  }
  if (error.code === "invalid_operator_token")
    return `PARLEY_TOKEN is unknown or revoked: make a new one with ${invocation} create-operator-token <name>`;
  return error.message;
}

export interface CliHooks {
  /**
   * Runs the command without a running Parley (the repository's
   * launcher: on the database directly); absent, that is an error.
   */
  direct?: (argv: string[], why: string) => Promise<number>;
  /** How the user runs the command, for the commands its messages suggest: `npx parley` unless said. */
  invocation?: string;
  out?: Print;
  err?: Print;
  env?: NodeJS.ProcessEnv;
}

/** Runs one command line; resolves with the exit code (EXIT). */
/** How the user runs this command line (CliHooks.invocation), for the commands its messages suggest. */
let invocation = "npx parley";

export async function runCli(argv: string[], hooks: CliHooks = {}): Promise<number> {
  invocation = hooks.invocation ?? "npx parley";
  const out = hooks.out ?? ((text: string) => console.log(text));
  const err = hooks.err ?? ((text: string) => console.error(text));
  // A load test takes an account's key and the target's URL, never the operator's channel.
  if (argv[0] === "load-test") {
    const code = await loadTestCommand(argv.slice(1), out, err);
    if (code === "usage") err(USAGE);
    return code === "usage" ? EXIT.usage : EXIT[code];
  }
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        alg: { type: "string" },
        label: { type: "string" },
        json: { type: "boolean" },
        "toll-free": { type: "boolean" },
        default: { type: "boolean" },
        "read-only": { type: "boolean" },
        types: { type: "string" },
        description: { type: "string" },
        url: { type: "string" },
        since: { type: "string" },
        after: { type: "string" },
        limit: { type: "string" },
        before: { type: "string" },
        ordered: { type: "boolean" },
        unordered: { type: "boolean" },
        rate: { type: "string" },
        burst: { type: "string" },
        "max-in-flight": { type: "string" },
        enable: { type: "boolean" },
        disable: { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (error) {
    err(`${(error as Error).message}\n\n${USAGE}`);
    return EXIT.usage;
  }
  const { positionals, values } = parsed;
  const [name, ...args] = positionals;
  if (values.help) {
    out(USAGE);
    return EXIT.done;
  }
  if (!name) {
    err(USAGE);
    return EXIT.usage;
  }
  const command = COMMANDS[name];
  if (!command) {
    err(`unknown command "${name}"\n\n${USAGE}`);
    return EXIT.usage;
  }
  const arity = ARITY.get(name) ?? 0;
  if (args.length > arity) {
    err(
      `${name} takes ${arity} argument${arity === 1 ? "" : "s"}; not these: ${args.slice(arity).join(" ")}\n\n${USAGE}`,
    );
    return EXIT.usage;
  }
  try {
    const parley = await target(hooks.env ?? process.env);
    const { json, text } = await command(values.json ? parley : printable(parley), args, values as Options);
    out(values.json ? JSON.stringify(json, null, 2) : text);
    return EXIT.done;
  } catch (error) {
    if (error instanceof UsageError) {
      err(error.showUsage ? `${error.message}\n\n${USAGE}` : `parley: ${error.message}`);
      return EXIT.usage;
    }
    if (error instanceof NoParley || (error instanceof SocketProblem && error.kind === "stale")) {
      if (hooks.direct) return hooks.direct(argv, error.message);
      err(`parley: ${error.message}`);
      return EXIT.unreachable;
    }
    if (error instanceof SocketProblem) {
      err(`parley: ${error.message}`);
      return EXIT.unreachable;
    }
    if (error instanceof ParleyError) {
      if (error.status === 401 || error.status === 403) {
        err(`parley: ${terminalSafe(credentialMessage(error))}`);
        return EXIT.refused;
      }
      if (error.status === 0) {
        err(`parley: ${error.message}`);
        return EXIT.unreachable;
      }
      err(`error: ${terminalSafe(error.message)}`);
      return EXIT.failed;
    }
    throw error;
  }
}
