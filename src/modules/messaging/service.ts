/**
 * Persistent chat: rooms, messages and replies, polls, and the account's chat users.
 * Every function takes the acting user (from a messaging token) and plain values, checks
 * that the user may do it, and returns records in the interface's field names. Changes
 * that sockets care about are announced to the room through the realtime broker.
 */
import { and, asc, count, desc, eq, ilike, inArray, isNull, or, type SQL, sql } from "drizzle-orm";
import { db } from "../../db/client";
import { AppError, isDependencyDown } from "../../core/errors";
import { announceToRoom } from "../../realtime/topics";
import { admitChatBytes, assertChatStorage, type ChatStorage, readChatStorage } from "../limits/quotas";
import type { VerifiedToken } from "../token/service";
import { chatMessages, chatPollOptions, chatPollVotes, chatRooms, chatUsers } from "./schema";

export const PAGE_SIZE_DEFAULT = 20;
export const PAGE_SIZE_MAX = 100;
/** Messages sent as `archived_message` events when a socket joins a room. */
export const HISTORY_ON_JOIN = PAGE_SIZE_DEFAULT;
export const CONTENT_MAX_CHARS = 10_000;
export const POLL_OPTIONS_MIN = 2;
export const POLL_OPTIONS_MAX = 20;
export const POLL_OPTION_MAX_CHARS = 200;
export const SEARCH_TERM_MAX_CHARS = 200;
export const ROOM_STATUSES = ["active", "inactive"] as const;
export type RoomStatus = (typeof ROOM_STATUSES)[number];

const CHANNEL_ID = /^[^\p{Cc}/]{1,128}$/u;
const USER_ID = /^\P{Cc}{1,256}$/u;
const CONTENT_TYPE = /^[a-z][a-z0-9_.+/-]{0,63}$/;
const MAX_INT = 2_147_483_647;

export interface Actor {
  accountId: string;
  userId: string;
  /** The token's display name, or empty. */
  name: string;
  moderator: boolean;
}

export function actorFrom(session: VerifiedToken): Actor {
  // PostgreSQL text cannot hold NUL, which a token's name could carry.
  const name = (session.user.name ?? "").replaceAll("\u0000", "");
  return { accountId: session.accountId, userId: session.user.id, name, moderator: session.user.moderator };
}

export interface RoomView {
  id: number;
  app_id: string;
  created_by: string;
  owner_id: number;
  session_id: string;
  channel_id: string;
  allowed_user_ids: string[];
  status: string;
  created_at: string;
}

export interface PollOptionView {
  id: number;
  text: string;
  vote_count: number;
}

export interface MessageView {
  id: number;
  channel_id: string;
  parent_id: number | null;
  content: string;
  content_type: string;
  created_by: string;
  created_by_name: string;
  inserted_at: string;
  updated_at: string;
  /** Top-level messages only. */
  reply_count?: number;
  /** Polls only: the options in their order, with their ids. */
  options?: PollOptionView[];
}

export interface DayOfMessages {
  /** The UTC day, YYYY-MM-DD. */
  day: string;
  messages: MessageView[];
}

export type MessageList = { messages: MessageView[] } | { days: DayOfMessages[] };

export interface UserView {
  id: string;
  name: string;
}

export interface PollVoteView {
  answer: number;
  user_id: string;
}

export interface Page {
  size?: number;
  offset?: number;
}

type RoomRow = typeof chatRooms.$inferSelect;
type MessageRow = typeof chatMessages.$inferSelect;

export function positiveInt(field: string, value: unknown): number {
  const number = typeof value === "string" && /^\d+$/.test(value) ? Number(value) : value;
  if (typeof number !== "number" || !Number.isInteger(number) || number < 1 || number > MAX_INT) {
    throw new AppError("validation_failed", `${field}: must be a whole number from 1 to ${MAX_INT}`);
  }
  return number;
}

function checkChannelId(channelId: string): void {
  if (!CHANNEL_ID.test(channelId)) {
    throw new AppError("validation_failed", "channel_id: 1 to 128 characters, without slashes or control characters");
  }
}

function checkUserId(userId: string): void {
  if (!USER_ID.test(userId)) throw new AppError("validation_failed", "user_id: 1 to 256 characters, without control characters");
}

function checkContent(value: unknown): string {
  if (typeof value !== "string" || value.trim() === "") throw new AppError("validation_failed", "content: must be a non-empty string");
  if (value.includes("\u0000")) throw new AppError("validation_failed", "content: NUL characters are not allowed");
  if (value.length > CONTENT_MAX_CHARS) throw new AppError("validation_failed", `content: at most ${CONTENT_MAX_CHARS} characters`);
  return value;
}

/** Makes a LIKE pattern that matches `term` literally anywhere: `%`, `_` and `\` lose their meaning. */
export function containsPattern(term: string): string {
  return `%${term.replace(/[\\%_]/g, (char) => `\\${char}`)}%`;
}

function checkSearchTerm(term: string): string {
  if (term.trim() === "") throw new AppError("validation_failed", "search_term: must not be empty");
  if (term.includes("\u0000")) throw new AppError("validation_failed", "search_term: NUL characters are not allowed");
  if (term.length > SEARCH_TERM_MAX_CHARS) throw new AppError("validation_failed", `search_term: at most ${SEARCH_TERM_MAX_CHARS} characters`);
  return term;
}

function pageOf(page: Page): { size: number; offset: number } {
  return { size: page.size ?? PAGE_SIZE_DEFAULT, offset: page.offset ?? 0 };
}

// ---- users

/** Chat users already written by this process, so the hot path does not write on every request. */
const knownUsers = new Map<string, { id: number; name: string }>();
const KNOWN_USERS_MAX = 10_000;

/** Upserts the acting user into the account's chat users and returns its numeric id. */
export async function rememberUser(actor: Actor): Promise<number> {
  const cacheKey = `${actor.accountId}\u0000${actor.userId}`;
  const known = knownUsers.get(cacheKey);
  if (known && (actor.name === "" || known.name === actor.name)) return known.id;
  checkUserId(actor.userId);
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

async function namesOf(accountId: string, userIds: string[]): Promise<UserView[]> {
  if (userIds.length === 0) return [];
  const rows = await db
    .select({ id: chatUsers.userId, name: chatUsers.name })
    .from(chatUsers)
    .where(and(eq(chatUsers.accountId, accountId), inArray(chatUsers.userId, userIds)));
  const names = new Map(rows.map((row) => [row.id, row.name]));
  return userIds.map((id) => ({ id, name: names.get(id) ?? "" }));
}

export async function searchUsers(actor: Actor, term: string, page: Page = {}): Promise<UserView[]> {
  const pattern = containsPattern(checkSearchTerm(term));
  const { size, offset } = pageOf(page);
  return db
    .select({ id: chatUsers.userId, name: chatUsers.name })
    .from(chatUsers)
    .where(and(eq(chatUsers.accountId, actor.accountId), or(ilike(chatUsers.name, pattern), ilike(chatUsers.userId, pattern))))
    .orderBy(asc(chatUsers.name), asc(chatUsers.userId))
    .limit(size)
    .offset(offset);
}

// ---- rooms

function roomView(room: RoomRow): RoomView {
  return {
    id: room.id,
    app_id: room.accountId,
    created_by: room.createdBy,
    owner_id: room.ownerId,
    session_id: room.channelId,
    channel_id: room.channelId,
    allowed_user_ids: room.allowedUserIds,
    status: room.status,
    created_at: room.createdAt.toISOString(),
  };
}

/** The owner and moderators manage a room: its users, and anyone's messages. */
function manages(room: RoomRow, actor: Actor): boolean {
  return actor.moderator || room.createdBy === actor.userId;
}

function mayEnter(room: RoomRow, actor: Actor): boolean {
  return manages(room, actor) || room.allowedUserIds.length === 0 || room.allowedUserIds.includes(actor.userId);
}

async function findRoom(accountId: string, channelId: string): Promise<RoomRow | undefined> {
  const [room] = await db
    .select()
    .from(chatRooms)
    .where(and(eq(chatRooms.accountId, accountId), eq(chatRooms.channelId, channelId)));
  return room;
}

/** The room if the actor may read it; 404 when the account has no such room, 403 when it is closed to the actor. */
async function enterRoom(actor: Actor, channelId: string, purpose: "read" | "write" = "read"): Promise<RoomRow> {
  const room = admitted(await findRoom(actor.accountId, channelId), actor, channelId, purpose);
  await rememberUser(actor);
  return room;
}

/** The room found for `channelId` if the actor may use it so; the 404 or 403 otherwise. */
function admitted(room: RoomRow | undefined, actor: Actor, channelId: string, purpose: "read" | "write"): RoomRow {
  if (!room) throw new AppError("not_found", `no room "${channelId}"`);
  if (!mayEnter(room, actor)) throw new AppError("forbidden", `user "${actor.userId}" may not enter room "${channelId}"`);
  if (purpose === "write" && room.status !== "active") throw new AppError("forbidden", `room "${channelId}" is ${room.status}: it is read-only`);
  return room;
}

function manageRoom(room: RoomRow, actor: Actor): void {
  if (!manages(room, actor)) throw new AppError("forbidden", `only the room's owner or a moderator may do this in "${room.channelId}"`);
}

export async function listRooms(actor: Actor): Promise<RoomView[]> {
  await rememberUser(actor);
  const open = or(
    sql`cardinality(${chatRooms.allowedUserIds}) = 0`,
    sql`${actor.userId} = any(${chatRooms.allowedUserIds})`,
    eq(chatRooms.createdBy, actor.userId),
  );
  const rows = await db
    .select()
    .from(chatRooms)
    .where(actor.moderator ? eq(chatRooms.accountId, actor.accountId) : and(eq(chatRooms.accountId, actor.accountId), open))
    .orderBy(asc(chatRooms.id));
  return rows.map(roomView);
}

export async function createRoom(actor: Actor, input: { channelId: string; allowedUserIds?: string[]; status?: RoomStatus }): Promise<RoomView> {
  checkChannelId(input.channelId);
  for (const userId of input.allowedUserIds ?? []) checkUserId(userId);
  const ownerId = await rememberUser(actor);
  const [room] = await db
    .insert(chatRooms)
    .values({
      accountId: actor.accountId,
      channelId: input.channelId,
      createdBy: actor.userId,
      ownerId,
      allowedUserIds: [...new Set(input.allowedUserIds ?? [])],
      status: input.status ?? "active",
    })
    .onConflictDoNothing()
    .returning();
  if (!room) throw new AppError("conflict", `room "${input.channelId}" already exists`);
  return roomView(room);
}

export async function getRoom(actor: Actor, channelId: string): Promise<RoomView> {
  return roomView(await enterRoom(actor, channelId));
}

/** Whether a room of that name exists in the account and, if so, whether the actor may enter it. */
export async function roomAccess(actor: Actor, channelId: string): Promise<"absent" | "allowed" | "forbidden"> {
  checkChannelId(channelId);
  const room = await findRoom(actor.accountId, channelId);
  if (!room) return "absent";
  return mayEnter(room, actor) ? "allowed" : "forbidden";
}

/** Who is in a room: the owner and the allowed users of a closed room; of an open one, the owner and everyone who has posted. */
async function roomUserIds(room: RoomRow): Promise<string[]> {
  if (room.allowedUserIds.length > 0) return [...new Set([room.createdBy, ...room.allowedUserIds])];
  const posters = await db
    .selectDistinct({ userId: chatMessages.createdBy })
    .from(chatMessages)
    .where(and(eq(chatMessages.accountId, room.accountId), eq(chatMessages.roomId, room.id)));
  return [...new Set([room.createdBy, ...posters.map((poster) => poster.userId).sort()])];
}

export async function roomUsers(actor: Actor, channelId: string): Promise<UserView[]> {
  const room = await enterRoom(actor, channelId);
  return namesOf(actor.accountId, await roomUserIds(room));
}

export async function roomUser(actor: Actor, channelId: string, userId: string): Promise<UserView> {
  const room = await enterRoom(actor, channelId);
  if (!(await roomUserIds(room)).includes(userId)) throw new AppError("not_found", `user "${userId}" is not in room "${channelId}"`);
  const [user] = await namesOf(actor.accountId, [userId]);
  return user!;
}

export async function addRoomUser(actor: Actor, channelId: string, userId: string): Promise<RoomView> {
  checkUserId(userId);
  const room = await enterRoom(actor, channelId);
  manageRoom(room, actor);
  // The user may never have used a token yet; it gets a chat user (named later by its first token).
  await db.insert(chatUsers).values({ accountId: actor.accountId, userId }).onConflictDoNothing();
  const [updated] = await db
    .update(chatRooms)
    .set({
      allowedUserIds: sql`case when ${userId} = any(${chatRooms.allowedUserIds}) then ${chatRooms.allowedUserIds} else array_append(${chatRooms.allowedUserIds}, ${userId}::text) end`,
    })
    .where(and(eq(chatRooms.accountId, actor.accountId), eq(chatRooms.id, room.id)))
    .returning();
  return roomView(updated!);
}

export async function removeRoomUser(actor: Actor, channelId: string, userId: string): Promise<RoomView> {
  checkUserId(userId);
  const room = await enterRoom(actor, channelId);
  manageRoom(room, actor);
  if (!room.allowedUserIds.includes(userId)) throw new AppError("not_found", `user "${userId}" is not in the allowed users of room "${channelId}"`);
  const [updated] = await db
    .update(chatRooms)
    .set({ allowedUserIds: sql`array_remove(${chatRooms.allowedUserIds}, ${userId}::text)` })
    .where(and(eq(chatRooms.accountId, actor.accountId), eq(chatRooms.id, room.id)))
    .returning();
  return roomView(updated!);
}

// ---- messages

/** Adds reply counts and poll options (with their vote counts) to stored messages, in three queries at most. */
async function present(room: RoomRow, rows: MessageRow[]): Promise<MessageView[]> {
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
  const optionsOf = new Map<number, PollOptionView[]>();
  for (const option of options) {
    const list = optionsOf.get(option.messageId) ?? [];
    list.push({ id: option.id, text: option.text, vote_count: votesOf.get(option.id) ?? 0 });
    optionsOf.set(option.messageId, list);
  }
  return rows.map((row) => viewOf(room, row, repliesOf.get(row.id) ?? 0, optionsOf.get(row.id) ?? []));
}

/** One page of a room's messages matching `filter`, newest first, ready to send. */
async function pageOfMessages(room: RoomRow, filter: SQL | undefined, page: Page): Promise<MessageView[]> {
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


function viewOf(room: RoomRow, row: MessageRow, replies: number, options: PollOptionView[]): MessageView {
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
function groupByDay(messages: MessageView[]): DayOfMessages[] {
  const days: DayOfMessages[] = [];
  for (const message of messages) {
    const day = message.inserted_at.slice(0, 10);
    const last = days.at(-1);
    if (last?.day === day) last.messages.push(message);
    else days.push({ day, messages: [message] });
  }
  return days;
}

function listOf(messages: MessageView[], byDay: boolean | undefined): MessageList {
  return byDay ? { days: groupByDay(messages) } : { messages };
}

async function findMessage(room: RoomRow, messageId: number): Promise<MessageRow> {
  const [row] = await db
    .select()
    .from(chatMessages)
    .where(and(eq(chatMessages.accountId, room.accountId), eq(chatMessages.roomId, room.id), eq(chatMessages.id, messageId)));
  if (!row) throw new AppError("not_found", `no message ${messageId} in room "${room.channelId}"`);
  return row;
}

export function parseMessageIds(field: string, text: string): number[] {
  const ids = text
    .split(",")
    .map((part) => part.trim())
    .filter((part) => part !== "");
  if (ids.length > PAGE_SIZE_MAX) throw new AppError("validation_failed", `${field}: at most ${PAGE_SIZE_MAX} ids`);
  return ids.map((id) => positiveInt(field, id));
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

/** The latest top-level messages of a room, oldest first, as a joining socket receives them. */
export async function recentMessages(actor: Actor, channelId: string): Promise<MessageView[]> {
  checkChannelId(channelId);
  const list = await listMessages(actor, channelId, { size: HISTORY_ON_JOIN });
  return "messages" in list ? list.messages.reverse() : [];
}

export async function searchMessages(actor: Actor, channelId: string, term: string, page: Page = {}): Promise<MessageList> {
  const pattern = containsPattern(checkSearchTerm(term));
  const room = await enterRoom(actor, channelId);
  return { messages: await pageOfMessages(room, ilike(chatMessages.content, pattern), page) };
}

export async function getMessage(actor: Actor, channelId: string, messageId: number): Promise<MessageView> {
  const room = await enterRoom(actor, channelId);
  const [message] = await present(room, [await findMessage(room, messageId)]);
  return message!;
}

export interface NewMessage {
  content: unknown;
  content_type?: unknown;
  options?: unknown;
  parent_id?: unknown;
}

function checkPollOptions(options: unknown): string[] {
  if (!Array.isArray(options) || options.length < POLL_OPTIONS_MIN || options.length > POLL_OPTIONS_MAX) {
    throw new AppError("validation_failed", `options: a poll has ${POLL_OPTIONS_MIN} to ${POLL_OPTIONS_MAX} options`);
  }
  const texts = options.map((option) => {
    if (typeof option !== "string" || option.trim() === "" || option.length > POLL_OPTION_MAX_CHARS || option.includes("\u0000")) {
      throw new AppError("validation_failed", `options: each option is a non-empty string of at most ${POLL_OPTION_MAX_CHARS} characters`);
    }
    return option.trim();
  });
  if (new Set(texts).size !== texts.length) throw new AppError("validation_failed", "options: the options must differ");
  return texts;
}

interface Draft {
  content: string;
  contentType: string;
  options: string[] | undefined;
  parentId: number | null;
}

function checkDraft(input: NewMessage): Draft {
  if (typeof input !== "object" || input === null) throw new AppError("validation_failed", "the payload must be an object");
  const content = checkContent(input.content);
  const contentType = input.content_type ?? "text";
  if (typeof contentType !== "string" || !CONTENT_TYPE.test(contentType)) {
    throw new AppError("validation_failed", "content_type: lower-case letters, digits and _ . + / -, at most 64 characters");
  }
  const options = contentType === "poll" ? checkPollOptions(input.options) : undefined;
  if (contentType !== "poll" && input.options !== undefined) throw new AppError("validation_failed", "options: only a poll has options");
  const parentId = input.parent_id === undefined || input.parent_id === null ? null : positiveInt("parent_id", input.parent_id);
  return { content, contentType, options, parentId };
}

/**
 * Stores a message (a poll when content_type is "poll"; a reply when parent_id is set),
 * broadcasts it as `new_message`, and resolves once both are done: a resolved post is a
 * stored message. Posts are written in the order they were made, together with whatever
 * else is waiting (see the writer below), and broadcast in that order.
 */
export async function postMessage(actor: Actor, channelId: string, input: NewMessage): Promise<MessageView> {
  const draft = checkDraft(input);
  return new Promise((resolve, reject) => {
    waiting.push({ actor, channelId, draft, resolve, reject });
    if (!writing) {
      writing = true;
      // One turn of the event loop: the posts of frames read together are written together.
      setImmediate(writeWaiting);
    }
  });
}

// ---- the message writer: posts of every socket of this process, in batches

interface Post {
  actor: Actor;
  channelId: string;
  draft: Draft;
  resolve(message: MessageView): void;
  reject(error: unknown): void;
}

/** Posts not yet written, oldest first. One batch is written at a time, so order holds across batches. */
let waiting: Post[] = [];
let writing = false;
/** Rows in one INSERT at most; a longer queue is written in several. */
const WRITE_BATCH_MAX = 500;

/**
 * Takes back the posts still waiting for the writer, none of them stored, failing each with
 * `reason`: the process is stopping. A batch already being written finishes.
 */
export function withdrawWaitingPosts(reason: Error): void {
  const withdrawn = waiting;
  waiting = [];
  for (const post of withdrawn) post.reject(reason);
}

async function writeWaiting(): Promise<void> {
  while (waiting.length > 0) {
    const batch = waiting.slice(0, WRITE_BATCH_MAX);
    waiting = waiting.slice(batch.length);
    try {
      await writeBatch(batch);
    } catch (error) {
      for (const post of batch) post.reject(error);
    }
  }
  writing = false;
}

/**
 * Checks every post as postMessage always has (the room, the parent, the storage quota),
 * stores runs of plain messages with one INSERT each and polls in their own transaction,
 * in order, then broadcasts and settles each post in that order.
 */
async function writeBatch(batch: Post[]): Promise<void> {
  const rooms = new Map<string, Promise<RoomRow | undefined>>();
  const roomOf = (post: Post) => {
    const key = `${post.actor.accountId}\u0000${post.channelId}`;
    if (!rooms.has(key)) rooms.set(key, findRoom(post.actor.accountId, post.channelId));
    return rooms.get(key)!;
  };
  // Read beside the rooms: the quota does not depend on them.
  const storage = new Map<string, Promise<ChatStorage>>();
  for (const { actor } of batch) if (!storage.has(actor.accountId)) storage.set(actor.accountId, readChatStorage(actor.accountId));
  for (const read of storage.values()) read.catch(() => {}); // awaited below, unless no post gets that far
  const checked = await Promise.all(
    batch.map(async (post) => {
      try {
        const room = admitted(await roomOf(post), post.actor, post.channelId, "write");
        await rememberUser(post.actor);
        if (post.draft.parentId !== null) {
          const parent = await findMessage(room, post.draft.parentId);
          if (parent.parentId !== null) throw new AppError("validation_failed", "parent_id: a reply cannot have replies; answer its parent");
        }
        return { post, room };
      } catch (error) {
        post.reject(error);
        return undefined;
      }
    }),
  );
  const admittedPosts = await withinQuota(checked.filter((entry) => entry !== undefined), storage);
  // Runs of plain messages share an INSERT; a poll is written alone, in its place.
  for (let start = 0; start < admittedPosts.length; ) {
    let end = start + 1;
    if (!admittedPosts[start]!.post.draft.options) while (end < admittedPosts.length && !admittedPosts[end]!.post.draft.options) end++;
    const run = admittedPosts.slice(start, end);
    start = end;
    let messages: Array<MessageView | Error>;
    try {
      messages = run[0]!.post.draft.options ? [await storePoll(run[0]!)] : await storeMessages(run);
    } catch (error) {
      messages = run.map(() => error as Error);
    }
    for (const [i, { post }] of run.entries()) {
      const message = messages[i]!;
      if (message instanceof Error) {
        post.reject(message);
        continue;
      }
      // Not awaited: this process's sockets have it when the call returns, and the writer
      // must not stall on Redis (copies for other processes keep their order on one connection).
      announceToRoom(post.actor.accountId, post.channelId, "new_message", message);
      post.resolve(message);
    }
  }
}

type Admitted = { post: Post; room: RoomRow };

/** The posts within their account's stored-bytes quota, counted in order; the others are refused. */
async function withinQuota(entries: Admitted[], storage: Map<string, Promise<ChatStorage>>): Promise<Admitted[]> {
  const bytesOf = ({ post: { draft } }: Admitted) =>
    (draft.options ?? []).reduce((bytes, text) => bytes + Buffer.byteLength(text), Buffer.byteLength(draft.content));
  const accounts = [...new Set(entries.map((entry) => entry.post.actor.accountId))];
  const verdicts = new Map<Admitted, unknown>();
  await Promise.all(
    accounts.map(async (accountId) => {
      const mine = entries.filter((entry) => entry.post.actor.accountId === accountId);
      try {
        const refusals = admitChatBytes(await storage.get(accountId)!, mine.map(bytesOf));
        for (const [i, entry] of mine.entries()) verdicts.set(entry, refusals[i]);
      } catch (error) {
        for (const entry of mine) verdicts.set(entry, error);
      }
    }),
  );
  return entries.filter((entry) => {
    const refusal = verdicts.get(entry);
    if (refusal !== undefined) entry.post.reject(refusal);
    return refusal === undefined;
  });
}

function rowOf({ post: { actor, draft }, room }: Admitted) {
  return {
    accountId: actor.accountId,
    roomId: room.id,
    parentId: draft.parentId,
    content: draft.content,
    contentType: draft.contentType,
    createdBy: actor.userId,
    createdByName: actor.name || actor.userId,
  };
}

/**
 * Plain messages in one statement. Their ids come from the sequence in the order of the
 * VALUES, so the rows sorted by id pair with the posts in order. A statement refused for
 * one row (a parent deleted meanwhile) is retried row by row, so only that post fails.
 */
async function storeMessages(run: Admitted[]): Promise<Array<MessageView | Error>> {
  try {
    const rows = (await db.insert(chatMessages).values(run.map(rowOf)).returning()).sort((a, b) => a.id - b.id);
    // A new message has no replies or votes yet, so its view is built without reading back.
    return rows.map((row, i) => viewOf(run[i]!.room, row, 0, []));
  } catch (error) {
    if (run.length === 1 || isDependencyDown(error)) throw error;
    const one: Array<MessageView | Error> = [];
    for (const entry of run) {
      one.push(
        await db
          .insert(chatMessages)
          .values(rowOf(entry))
          .returning()
          .then(
            ([row]) => viewOf(entry.room, row!, 0, []),
            (failure: Error) => failure,
          ),
      );
    }
    return one;
  }
}

async function storePoll(entry: Admitted): Promise<MessageView> {
  const options = entry.post.draft.options!;
  return db.transaction(async (tx) => {
    const [row] = await tx.insert(chatMessages).values(rowOf(entry)).returning();
    const stored = await tx
      .insert(chatPollOptions)
      .values(options.map((text, position) => ({ accountId: entry.post.actor.accountId, messageId: row!.id, position, text })))
      .returning({ id: chatPollOptions.id, text: chatPollOptions.text, position: chatPollOptions.position });
    const ordered = stored.sort((a, b) => a.position - b.position).map(({ id, text }) => ({ id, text, vote_count: 0 }));
    return viewOf(entry.room, row!, 0, ordered);
  });
}

/** Only the author edits; the room must be active. Broadcasts `message_updated`. */
export async function editMessage(actor: Actor, channelId: string, messageId: number, content: string | undefined): Promise<MessageView> {
  const room = await enterRoom(actor, channelId, "write");
  const row = await findMessage(room, messageId);
  if (row.createdBy !== actor.userId) throw new AppError("forbidden", "only the author may edit a message");
  if (content === undefined) return (await present(room, [row]))[0]!;
  const checked = checkContent(content);
  await assertChatStorage(actor.accountId, Buffer.byteLength(checked) - Buffer.byteLength(row.content));
  const [updated] = await db
    .update(chatMessages)
    .set({ content: checked, updatedAt: sql`now()` })
    .where(and(eq(chatMessages.accountId, actor.accountId), eq(chatMessages.id, row.id)))
    .returning();
  const [message] = await present(room, [updated!]);
  await announceToRoom(actor.accountId, channelId, "message_updated", message);
  return message!;
}

function plural(count: number, one: string, many: string): string {
  return `${count} ${count === 1 ? one : many}`;
}

/** Deletes messages with their replies, all or none: each must be the actor's own, unless the actor manages the room. */
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
export async function deleteMessages(actor: Actor, channelId: string, input: { isEmpty?: boolean; messageIds?: number[] }): Promise<string> {
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

export async function listReplies(actor: Actor, channelId: string, messageId: number, query: Page & { groupByDay?: boolean }): Promise<MessageList> {
  const room = await enterRoom(actor, channelId);
  await findMessage(room, messageId);
  return listOf(await pageOfMessages(room, eq(chatMessages.parentId, messageId), query), query.groupByDay);
}

export async function deleteReplies(actor: Actor, channelId: string, messageId: number, replyIds: number[]): Promise<string> {
  const room = await enterRoom(actor, channelId);
  await findMessage(room, messageId);
  if (replyIds.length === 0) throw new AppError("validation_failed", "reply_message_ids: give the ids of the replies to delete");
  const deleted = await deleteSome(actor, room, await messagesIn(room, replyIds, messageId));
  await announceToRoom(actor.accountId, channelId, "message_deleted", { channel_id: channelId, parent_id: messageId, message_ids: deleted });
  return `${plural(deleted.length, "reply", "replies")} deleted`;
}

// ---- polls

async function findPoll(room: RoomRow, messageId: number): Promise<MessageRow> {
  const message = await findMessage(room, messageId);
  if (message.contentType !== "poll") throw new AppError("validation_failed", `message ${messageId} is not a poll`);
  return message;
}

export async function isVoted(actor: Actor, channelId: string, messageId: number): Promise<boolean> {
  const room = await enterRoom(actor, channelId);
  await findPoll(room, messageId);
  const [vote] = await db
    .select({ optionId: chatPollVotes.optionId })
    .from(chatPollVotes)
    .where(and(eq(chatPollVotes.accountId, actor.accountId), eq(chatPollVotes.messageId, messageId), eq(chatPollVotes.userId, actor.userId)));
  return vote !== undefined;
}

export async function pollVotes(actor: Actor, channelId: string, messageId: number): Promise<PollVoteView[]> {
  const room = await enterRoom(actor, channelId);
  await findPoll(room, messageId);
  return db
    .select({ answer: chatPollVotes.optionId, user_id: chatPollVotes.userId })
    .from(chatPollVotes)
    .where(and(eq(chatPollVotes.accountId, actor.accountId), eq(chatPollVotes.messageId, messageId)))
    .orderBy(asc(chatPollVotes.votedAt), asc(chatPollVotes.userId));
}

/** Sets the actor's one answer to a poll (replacing an earlier one) and broadcasts `new_vote` with the new tallies. */
export async function vote(actor: Actor, channelId: string, messageId: number, optionId: number): Promise<PollVoteView> {
  const room = await enterRoom(actor, channelId, "write");
  await findPoll(room, messageId);
  const [option] = await db
    .select({ id: chatPollOptions.id })
    .from(chatPollOptions)
    .where(and(eq(chatPollOptions.accountId, actor.accountId), eq(chatPollOptions.messageId, messageId), eq(chatPollOptions.id, optionId)));
  if (!option) throw new AppError("validation_failed", `option ${optionId} is not an option of poll ${messageId}`);
  await db
    .insert(chatPollVotes)
    .values({ accountId: actor.accountId, messageId, userId: actor.userId, optionId })
    .onConflictDoUpdate({ target: [chatPollVotes.messageId, chatPollVotes.userId], set: { optionId, votedAt: sql`now()` } });
  const answer = { answer: optionId, user_id: actor.userId };
  const [poll] = await present(room, [await findMessage(room, messageId)]);
  await announceToRoom(actor.accountId, channelId, "new_vote", { message_id: messageId, ...answer, options: poll!.options });
  return answer;
}
