/**
 * The operator's command line: `bun run admin <command> [...]`. Exit codes: 0 done,
 * 1 the command failed (for example an unknown account), 2 the command was misused.
 */
import { parseArgs } from "node:util";
import { SIGNING_ALGORITHMS, type SigningAlgorithm } from "./config";
import { database } from "./db/client";
import { migrate } from "./db/migrate";
import { AppError } from "./http/errors";
import { createAccount, createApiKey, getAccount, listAccounts, revokeApiKey, rotateSigningKey } from "./modules/accounts/service";
import { addPhoneNumber, listPhoneNumbers, removePhoneNumber } from "./modules/mapper/service";
import { closeRedis } from "./queue/connection";

const USAGE = `usage: bun run admin <command> [options]

  create-account <name> [--alg RS256|ES256|EdDSA]   make an account; prints its API key once
  list-accounts [--json]                            accounts with their keys (never the secrets)
  create-key <account-id> [--label text]            another API key for the account; printed once
  revoke-key <key-id>                               the key stops working at once, on every process
  rotate-key <account-id> [--alg RS256|ES256|EdDSA] new signing key; the old kid verifies until its tokens expire
  add-number <account-id> <country> <number> [--toll-free]
                                                    a dial-in number (country: ISO code such as US)
  list-numbers <account-id> [--json]                the account's dial-in numbers with their ids
  remove-number <number-id>                         stop listing a dial-in number`;

class UsageError extends Error {}

function algorithmOption(value: string | undefined): SigningAlgorithm | undefined {
  if (value === undefined) return undefined;
  if (!(SIGNING_ALGORITHMS as readonly string[]).includes(value)) {
    throw new UsageError(`--alg must be one of ${SIGNING_ALGORITHMS.join(", ")}`);
  }
  return value as SigningAlgorithm;
}

function need(value: string | undefined, what: string): string {
  if (!value) throw new UsageError(`missing ${what}`);
  return value;
}

const COMMANDS: Record<string, (args: string[], options: Record<string, string | boolean | undefined>) => Promise<void>> = {
  async "create-account"([name], options) {
    const { account, apiKey, kid } = await createAccount(need(name, "<name>"), algorithmOption(options.alg as string | undefined));
    console.log(`account   ${account.id} (${account.name})`);
    console.log(`signing   ${account.signingAlgorithm}, kid ${kid}`);
    console.log(`api key   ${apiKey.apiKey}`);
    console.log("Keep the API key now: it is stored only as a hash and cannot be shown again.");
  },
  async "list-accounts"(_args, options) {
    const rows = await listAccounts();
    if (options.json) {
      console.log(JSON.stringify(rows, null, 2));
      return;
    }
    for (const account of rows) {
      console.log(`${account.id}  ${account.name}  ${account.signingAlgorithm}  created ${account.createdAt.toISOString()}`);
      for (const key of account.apiKeys) {
        const state = key.revokedAt ? `revoked ${key.revokedAt.toISOString()}` : "active";
        console.log(`  api key #${key.id}  ${key.prefix}…  ${key.label || "-"}  ${state}`);
      }
      for (const key of account.signingKeys) {
        const state = key.retiredAt ? `retired, verifies until ${key.verifyUntil?.toISOString()}` : "current";
        console.log(`  signing ${key.kid}  ${key.algorithm}  ${state}`);
      }
    }
    if (rows.length === 0) console.log("no accounts");
  },
  async "create-key"([accountId], options) {
    const key = await createApiKey(need(accountId, "<account-id>"), (options.label as string | undefined) ?? "");
    console.log(`api key #${key.id}   ${key.apiKey}`);
    console.log("Keep the API key now: it is stored only as a hash and cannot be shown again.");
  },
  async "revoke-key"([keyId]) {
    const id = Number(need(keyId, "<key-id>"));
    if (!Number.isInteger(id)) throw new UsageError("<key-id> is the number shown by list-accounts");
    await revokeApiKey(id);
    console.log(`api key #${id} revoked`);
  },
  async "rotate-key"([accountId], options) {
    const kid = await rotateSigningKey(need(accountId, "<account-id>"), algorithmOption(options.alg as string | undefined));
    console.log(`new signing key ${kid}; earlier keys keep verifying until their tokens expire`);
  },
  async "add-number"([accountId, countryCode, formattedNumber], options) {
    const account = await getAccount(need(accountId, "<account-id>"));
    const number = await addPhoneNumber(account.id, {
      countryCode: need(countryCode, "<country>"),
      formattedNumber: need(formattedNumber, "<number>"),
      tollFree: options["toll-free"] === true,
    });
    console.log(`number #${number.id}   ${number.countryCode}  ${number.formattedNumber}${number.tollFree ? "  toll-free" : ""}`);
  },
  async "list-numbers"([accountId], options) {
    const account = await getAccount(need(accountId, "<account-id>"));
    const numbers = await listPhoneNumbers(account.id);
    if (options.json) {
      console.log(JSON.stringify(numbers, null, 2));
      return;
    }
    for (const number of numbers) {
      console.log(`#${number.id}  ${number.countryCode}  ${number.formattedNumber}${number.tollFree ? "  toll-free" : ""}`);
    }
    if (numbers.length === 0) console.log("no numbers");
  },
  async "remove-number"([numberId]) {
    const id = Number(need(numberId, "<number-id>"));
    if (!Number.isInteger(id)) throw new UsageError("<number-id> is the number shown by list-numbers");
    const removed = await removePhoneNumber(id);
    console.log(`number #${removed.id} (${removed.formattedNumber}) removed from account ${removed.accountId}`);
  },
};

async function main(argv: string[]): Promise<number> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      alg: { type: "string" },
      label: { type: "string" },
      json: { type: "boolean" },
      "toll-free": { type: "boolean" },
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
    await run(args, values);
    return 0;
  } catch (error) {
    if (error instanceof UsageError) {
      console.error(`${error.message}\n\n${USAGE}`);
      return 2;
    }
    if (error instanceof AppError) {
      console.error(`error: ${error.message}`);
      return 1;
    }
    throw error;
  } finally {
    await closeRedis();
    await database.close();
  }
}

if (import.meta.main) process.exit(await main(process.argv.slice(2)));
