/**
 * A room's messages and replies as clients read them (pages, days, search, the history a
 * joining socket receives), and their editing and deletion, announced to the room.
 */
import { and, asc, count, desc, eq, gt, ilike, inArray, isNull, or, type SQL, sql } from "drizzle-orm";
import { db } from "../../db/client";
import { AppError } from "../../core/errors";
import { assertChatStorage } from "../limits";
import type { Actor } from "../auth";
import {
  type DayOfMessages,
  MAX_INT,
  type Message,
  type MessageList,
  PAGE_SIZE_DEFAULT,
  PAGE_SIZE_MAX,
  type PollOption,
} from "./model";
import { containsPattern, type Page, pageOf } from "./queries";
import { announceToRoom, enterRoom, manageRoom, manages, type RoomRow } from "./rooms";
import { chatMessages, chatPollOptions, chatPollVotes } from "./schema";

export type MessageRow = typeof chatMessages.$inferSelect;

/** Messages sent as `archived_message` events when a socket joins a room. */
export const HISTORY_ON_JOIN = PAGE_SIZE_DEFAULT;

/** Adds reply counts and poll options (with their vote counts) to stored messages, in three queries at most. */
export async function present(room: RoomRow, rows: MessageRow[]): Promise<Message[]> {
  const topIds = rows.filter((row) => row.parentId === null).map((row) => row.id);
  const pollIds = rows.filter((row) => row.contentType === "poll").map((row) => row.id);
  const [replyCounts, options, tallies] = await Promise.all([
    topIds.length === 0
      ? []
      : db
          .select({ parentId: chatMessages.parentId, replies: count() })
          .from(chatMessages)
          .where(and(eq(chatMessages.accountId, room.accountId), inArray(chatMessages.parentId, topIds)))
          .groupBy(chatMessages.parentId),
    pollIds.length === 0
      ? []
      : db
          .select()
          .from(chatPollOptions)
          .where(and(eq(chatPollOptions.accountId, room.accountId), inArray(chatPollOptions.messageId, pollIds)))
          .orderBy(asc(chatPollOptions.messageId), asc(chatPollOptions.position)),
    pollIds.length === 0
      ? []
      : db
          .select({ optionId: chatPollVotes.optionId, votes: count() })
          .from(chatPollVotes)
          .where(and(eq(chatPollVotes.accountId, room.accountId), inArray(chatPollVotes.messageId, pollIds)))
          .groupBy(chatPollVotes.optionId),
  ]);
  const repliesOf = new Map(replyCounts.map((row) => [row.parentId, row.replies]));
  const votesOf = new Map(tallies.map((row) => [row.optionId, row.votes]));
  const optionsOf = new Map<number, PollOption[]>();
  for (const option of options) {
    const list = optionsOf.get(option.messageId) ?? [];
    list.push({ id: option.id, text: option.text, vote_count: votesOf.get(option.id) ?? 0 });
    optionsOf.set(option.messageId, list);
  }
  return rows.map((row) => viewOf(room, row, repliesOf.get(row.id) ?? 0, optionsOf.get(row.id) ?? []));
}

/** One page of a room's messages matching `filter`, newest first, ready to send. */
async function pageOfMessages(room: RoomRow, filter: SQL | undefined, page: Page): Promise<Message[]> {
  const { size, offset } = pageOf(page);
  const rows = await db
    .select()
    .from(chatMessages)
    .where(and(eq(chatMessages.accountId, room.accountId), eq(chatMessages.roomId, room.id), filter))
    .orderBy(desc(chatMessages.id))
    .limit(size)
    .offset(offset);
  return present(room, rows);
}

export function viewOf(room: RoomRow, row: MessageRow, replies: number, options: PollOption[]): Message {
  return {
    id: row.id,
    channel_id: room.channelId,
    parent_id: row.parentId,
    content: row.content,
    content_type: row.contentType,
    created_by: row.createdBy,
    created_by_name: row.createdByName,
    inserted_at: row.insertedAt.toISOString(),
    updated_at: row.updatedAt.toISOString(),
    ...(row.parentId === null && { reply_count: replies }),
    ...(row.contentType === "poll" && { options }),
  };
}

/** Newest first, so each UTC day's group is newest first too and days come newest first. */
function groupByDay(messages: Message[]): DayOfMessages[] {
  const days: DayOfMessages[] = [];
  for (const message of messages) {
    const day = message.inserted_at.slice(0, 10);
    const last = days.at(-1);
    if (last?.day === day) last.messages.push(message);
    else days.push({ day, messages: [message] });
  }
  return days;
}

function listOf(messages: Message[], byDay: boolean | undefined): MessageList {
  return byDay ? { days: groupByDay(messages) } : { messages };
}

export async function findMessage(room: RoomRow, messageId: number): Promise<MessageRow> {
  const [row] = await db
    .select()
    .from(chatMessages)
    .where(
      and(eq(chatMessages.accountId, room.accountId), eq(chatMessages.roomId, room.id), eq(chatMessages.id, messageId)),
    );
  if (!row) throw new AppError("not_found", `no message ${messageId} in room "${room.channelId}"`);
  return row;
}

export function parseMessageIds(field: string, text: string): number[] {
  const ids = text
    .split(",")
    .map((part) => part.trim())
    .filter((part) => part !== "");
  if (ids.length > PAGE_SIZE_MAX) throw new AppError("validation_failed", `${field}: at most ${PAGE_SIZE_MAX} ids`);
  return ids.map((id) => {
    const number = /^\d+$/.test(id) ? Number(id) : Number.NaN;
    if (!(number >= 1 && number <= MAX_INT))
      throw new AppError("validation_failed", `${field}: must be a whole number from 1 to ${MAX_INT}`);
    return number;
  });
}

export async function listMessages(
  actor: Actor,
  channelId: string,
  query: Page & { messageIds?: number[]; groupByDay?: boolean },
): Promise<MessageList> {
  const room = await enterRoom(actor, channelId);
  const scope = query.messageIds
    ? inArray(chatMessages.id, query.messageIds.length > 0 ? query.messageIds : [0])
    : isNull(chatMessages.parentId);
  return listOf(await pageOfMessages(room, scope, query), query.groupByDay);
}

/**
 * The latest top-level messages of a room, oldest first, as a joining socket receives them, with
 * the room entered (its access checked) for the read that completes them.
 */
export async function recentMessages(actor: Actor, channelId: string): Promise<{ room: RoomRow; messages: Message[] }> {
  const room = await enterRoom(actor, channelId);
  const messages = await pageOfMessages(room, isNull(chatMessages.parentId), { size: HISTORY_ON_JOIN });
  return { room, messages: messages.reverse() };
}

/**
 * A room's top-level messages after `afterId`, oldest first: what was stored between a joining
 * socket's history and the moment it hears the room (at most a history's worth).
 */
export async function messagesAfter(room: RoomRow, afterId: number): Promise<Message[]> {
  const rows = await db
    .select()
    .from(chatMessages)
    .where(
      and(
        eq(chatMessages.accountId, room.accountId),
        eq(chatMessages.roomId, room.id),
        isNull(chatMessages.parentId),
        gt(chatMessages.id, afterId),
      ),
    )
    .orderBy(asc(chatMessages.id))
    .limit(HISTORY_ON_JOIN);
  return present(room, rows);
}

export async function searchMessages(
  actor: Actor,
  channelId: string,
  term: string,
  page: Page = {},
): Promise<MessageList> {
  const pattern = containsPattern(term);
  const room = await enterRoom(actor, channelId);
  return { messages: await pageOfMessages(room, ilike(chatMessages.content, pattern), page) };
}

export async function getMessage(actor: Actor, channelId: string, messageId: number): Promise<Message> {
  const room = await enterRoom(actor, channelId);
  const [message] = await present(room, [await findMessage(room, messageId)]);
  return message!;
}

/** Only the author edits; the room must be active. Broadcasts `message_updated`. */
export async function editMessage(
  actor: Actor,
  channelId: string,
  messageId: number,
  content: string | undefined,
): Promise<Message> {
  const room = await enterRoom(actor, channelId, "write");
  const row = await findMessage(room, messageId);
  if (row.createdBy !== actor.userId) throw new AppError("forbidden", "only the author may edit a message");
  if (content === undefined) return (await present(room, [row]))[0]!;
  await assertChatStorage(actor.accountId, Buffer.byteLength(content) - Buffer.byteLength(row.content));
  const [updated] = await db
    .update(chatMessages)
    .set({ content, updatedAt: sql`now()` })
    .where(and(eq(chatMessages.accountId, actor.accountId), eq(chatMessages.id, row.id)))
    .returning();
  const [message] = await present(room, [updated!]);
  await announceToRoom(actor.accountId, channelId, "message_updated", message);
  return message!;
}

function plural(count: number, one: string, many: string): string {
  return `${count} ${count === 1 ? one : many}`;
}

/**
 * Deletes messages with their replies, all or none: each must be the actor's own, unless the actor manages the room.
 */
async function deleteSome(actor: Actor, room: RoomRow, rows: MessageRow[]): Promise<number[]> {
  if (!manages(room, actor) && rows.some((row) => row.createdBy !== actor.userId)) {
    throw new AppError("forbidden", "only the author, the room's owner or a moderator may delete a message");
  }
  const ids = rows.map((row) => row.id);
  const deleted = await db
    .delete(chatMessages)
    .where(
      and(
        eq(chatMessages.accountId, actor.accountId),
        eq(chatMessages.roomId, room.id),
        or(inArray(chatMessages.id, ids), inArray(chatMessages.parentId, ids)),
      ),
    )
    .returning({ id: chatMessages.id });
  return deleted.map((row) => row.id).sort((a, b) => a - b);
}

async function messagesIn(room: RoomRow, ids: number[], parentId?: number): Promise<MessageRow[]> {
  const unique = [...new Set(ids)];
  const rows = await db
    .select()
    .from(chatMessages)
    .where(
      and(
        eq(chatMessages.accountId, room.accountId),
        eq(chatMessages.roomId, room.id),
        inArray(chatMessages.id, unique),
        parentId === undefined ? undefined : eq(chatMessages.parentId, parentId),
      ),
    );
  const missing = unique.filter((id) => !rows.some((row) => row.id === id));
  if (missing.length > 0) {
    const where = parentId === undefined ? `room "${room.channelId}"` : `the replies of message ${parentId}`;
    throw new AppError("not_found", `no message ${missing.join(", ")} in ${where}`);
  }
  return rows;
}

/** `is_empty` empties the room (owner or moderator only); otherwise deletes `message_ids` and their replies. */
export async function deleteMessages(
  actor: Actor,
  channelId: string,
  input: { isEmpty?: boolean; messageIds?: number[] },
): Promise<string> {
  const room = await enterRoom(actor, channelId);
  if (input.isEmpty) {
    manageRoom(room, actor);
    const deleted = await db
      .delete(chatMessages)
      .where(and(eq(chatMessages.accountId, actor.accountId), eq(chatMessages.roomId, room.id)))
      .returning({ id: chatMessages.id });
    await announceToRoom(actor.accountId, channelId, "message_deleted", { channel_id: channelId, is_empty: true });
    return `${plural(deleted.length, "message", "messages")} deleted; room "${channelId}" is empty`;
  }
  if (!input.messageIds || input.messageIds.length === 0) {
    throw new AppError("validation_failed", "message_ids: give the ids to delete, or is_empty: true");
  }
  const deleted = await deleteSome(actor, room, await messagesIn(room, input.messageIds));
  await announceToRoom(actor.accountId, channelId, "message_deleted", { channel_id: channelId, message_ids: deleted });
  return `${plural(deleted.length, "message", "messages")} deleted`;
}

export async function listReplies(
  actor: Actor,
  channelId: string,
  messageId: number,
  query: Page & { groupByDay?: boolean },
): Promise<MessageList> {
  const room = await enterRoom(actor, channelId);
  await findMessage(room, messageId);
  return listOf(await pageOfMessages(room, eq(chatMessages.parentId, messageId), query), query.groupByDay);
}

export async function deleteReplies(
  actor: Actor,
  channelId: string,
  messageId: number,
  replyIds: number[],
): Promise<string> {
  const room = await enterRoom(actor, channelId);
  await findMessage(room, messageId);
  if (replyIds.length === 0)
    throw new AppError("validation_failed", "reply_message_ids: give the ids of the replies to delete");
  const deleted = await deleteSome(actor, room, await messagesIn(room, replyIds, messageId));
  await announceToRoom(actor.accountId, channelId, "message_deleted", {
    channel_id: channelId,
    parent_id: messageId,
    message_ids: deleted,
  });
  return `${plural(deleted.length, "reply", "replies")} deleted`;
}
