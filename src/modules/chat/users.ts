/** The account's chat users: written as tokens are used, named by their latest token, searched by name or id. */
import { and, asc, eq, ilike, inArray, or, sql } from "drizzle-orm";
import { db } from "../../db/client";
import { assertModel } from "../../realtime";
import type { Actor } from "../auth";
import { type User, UserId } from "./model";
import { containsPattern, type Page, pageOf } from "./queries";
import { chatUsers } from "./schema";

/** Chat users already written by this process, so the hot path does not write on every request. */
const knownUsers = new Map<string, { id: number; name: string }>();
const KNOWN_USERS_MAX = 10_000;

/** Upserts the acting user into the account's chat users and returns its numeric id. */
export async function rememberUser(actor: Actor): Promise<number> {
  const cacheKey = `${actor.accountId}\u0000${actor.userId}`;
  const known = knownUsers.get(cacheKey);
  if (known && (actor.name === "" || known.name === actor.name)) return known.id;
  // A token may name its user with any text; a chat user's id is held to the model the routes use.
  assertModel(UserId, actor.userId, "user_id", "validation_failed");
  const [row] = await db
    .insert(chatUsers)
    .values({ accountId: actor.accountId, userId: actor.userId, name: actor.name })
    .onConflictDoUpdate({
      target: [chatUsers.accountId, chatUsers.userId],
      // A token without a name keeps the name an earlier token gave.
      set: { name: sql`case when excluded.name = '' then ${chatUsers.name} else excluded.name end` },
    })
    .returning({ id: chatUsers.id, name: chatUsers.name });
  if (knownUsers.size >= KNOWN_USERS_MAX) knownUsers.clear();
  knownUsers.set(cacheKey, { id: row!.id, name: row!.name });
  return row!.id;
}

export async function namesOf(accountId: string, userIds: string[]): Promise<User[]> {
  if (userIds.length === 0) return [];
  const rows = await db
    .select({ id: chatUsers.userId, name: chatUsers.name })
    .from(chatUsers)
    .where(and(eq(chatUsers.accountId, accountId), inArray(chatUsers.userId, userIds)));
  const names = new Map(rows.map((row) => [row.id, row.name]));
  return userIds.map((id) => ({ id, name: names.get(id) ?? "" }));
}

export async function searchUsers(actor: Actor, term: string, page: Page = {}): Promise<User[]> {
  const pattern = containsPattern(term);
  const { size, offset } = pageOf(page);
  return db
    .select({ id: chatUsers.userId, name: chatUsers.name })
    .from(chatUsers)
    .where(
      and(
        eq(chatUsers.accountId, actor.accountId),
        or(ilike(chatUsers.name, pattern), ilike(chatUsers.userId, pattern)),
      ),
    )
    .orderBy(asc(chatUsers.name), asc(chatUsers.userId))
    .limit(size)
    .offset(offset);
}
