/**
 * Quotas, counted in PostgreSQL where the things they count live, so they hold across
 * processes and whatever Redis does. Live streams are counted by the streaming service
 * inside its insert; stored chat bytes by database triggers (migration 0009_chat_bytes).
 */
import { definitionOf, type LimitName } from "./definitions";
import { LimitExceeded, limitsOf, storedChatBytes } from "./service";

/** The 429 for a full quota; `used` is what the account holds now. */
export function quotaExceeded(
  name: LimitName,
  limit: number,
  used: number,
  what: string,
  extra?: Record<string, unknown>,
): LimitExceeded {
  const definition = definitionOf(name);
  const retry = definition.kind === "quota" ? definition.retryAfterSeconds : 1;
  const unit = definition.kind === "quota" ? definition.unit : undefined;
  return new LimitExceeded(
    "quota_exceeded",
    `quota ${name} reached: ${what} (the account's limit is ${limit}, it uses ${used})`,
    [{ name, quota: limit, unit, remaining: Math.max(0, limit - used), resetSeconds: retry }],
    retry,
    extra,
  );
}

/**
 * Refuses chat text that would take the account past its stored-bytes quota. Posts that
 * race each other may pass the check together, so the quota can be passed by at most
 * one message per concurrent writer; the count itself (kept by triggers) stays exact.
 */
export async function assertChatStorage(accountId: string, addedBytes: number): Promise<void> {
  if (addedBytes <= 0) return;
  const limit = (await limitsOf(accountId))["chat.stored_bytes"];
  const used = await storedChatBytes(accountId);
  if (used + addedBytes > limit)
    throw quotaExceeded("chat.stored_bytes", limit, used, `storing ${addedBytes} more bytes of chat`);
}

/** An account's chat storage quota and what it holds, read once for a batch of posts. */
export interface ChatStorage {
  limit: number;
  used: number;
}

export async function readChatStorage(accountId: string): Promise<ChatStorage> {
  const [limits, used] = await Promise.all([limitsOf(accountId), storedChatBytes(accountId)]);
  return { limit: limits["chat.stored_bytes"], used };
}

/**
 * assertChatStorage for several pieces of chat text written together, in order: each one
 * is admitted while the stored bytes plus the ones admitted before it stay within the
 * quota; the refusal of one that does not fit is in its place.
 */
export function admitChatBytes({ limit, used }: ChatStorage, addedBytes: number[]): Array<LimitExceeded | undefined> {
  return addedBytes.map((bytes) => {
    if (bytes > 0 && used + bytes > limit)
      return quotaExceeded("chat.stored_bytes", limit, used, `storing ${bytes} more bytes of chat`);
    used += bytes;
    return undefined;
  });
}
