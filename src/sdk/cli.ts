/**
 * The `parley` command line: the operator's commands on a running Parley, through its admin
 * API. Locally it needs no credential: it speaks over DATA_DIR/parley.sock; remotely it takes
 * PARLEY_URL and an operator token in PARLEY_TOKEN. Runs on Node ≥ 20 (docs/cli.md).
 */
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { type Options, UsageError } from "./cli-arguments.js";
import { COMMANDS } from "./cli-commands.js";
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

type Print = (text: string) => void;

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

/** How the user runs this command line (CliHooks.invocation), for the commands its messages suggest. */
let invocation = "npx parley";

/** Runs one command line; resolves with the exit code (EXIT). */
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
    const { json, text } = await command(values.json ? parley : printable(parley), args, values as Options, invocation);
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
