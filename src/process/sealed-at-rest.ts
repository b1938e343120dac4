/**
 * Secrets an older Parley stored in plain text are sealed by whichever process migrates (the supervisor,
 * or a command working on the database directly), in one transaction: processes starting together wait
 * on the same rows and find none left. Before anything is sealed, the sealing key in force must open what
 * is sealed already; otherwise an AppError says what to put back, and a key file generated for this
 * check is removed, so that no later process seals under it.
 */
import { rmSync } from "node:fs";
import { log } from "../core/log";
import type { DatabaseHandle } from "../db/client";
import { prepareSealingKey, sealingKeyFile } from "../modules/accounts/sealing";
import { sealPlainSigningKeys } from "../modules/accounts/service";
import { sealPlainSecrets } from "../modules/webhooks/service";

export async function sealSecretsAtRest(database: DatabaseHandle): Promise<void> {
  const generated = prepareSealingKey();
  try {
    const sealed = await database.db.transaction(async (tx) => ({
      signingKeys: await sealPlainSigningKeys(tx),
      webhookEndpoints: await sealPlainSecrets(tx),
    }));
    if (sealed.signingKeys + sealed.webhookEndpoints > 0) log.info(sealed, "sealed the secrets stored in plain text");
  } catch (error) {
    if (generated) rmSync(sealingKeyFile(), { force: true });
    throw error;
  }
  if (generated) {
    log.info({ file: sealingKeyFile() }, "generated the key that seals secrets at rest: back it up with the database");
  }
}
