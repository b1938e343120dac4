/**
 * First start: with no account at all, make one so the service is usable at once. Its API
 * key goes to a file readable only by this user, never to the log.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { config } from "../../core/config";
import { log } from "../../core/log";
import { countAccounts, createAccount } from "./service";

export async function ensureFirstAccount(): Promise<void> {
  if (!config.admin.bootstrapAccount || (await countAccounts()) > 0) return;
  const { account, apiKey } = await createAccount("default");
  mkdirSync(config.database.dataDir, { recursive: true });
  const file = join(config.database.dataDir, "first-api-key");
  writeFileSync(file, `${apiKey.apiKey}\n`, { mode: 0o600 });
  log.info({ accountId: account.id, file }, "created the first account; its API key is in the file");
}
