/**
 * Posting: a new message or poll, its payload checked against its model by the socket, is
 * judged against the rules between its fields, then handed to this process's writer, which
 * stores the posts of every socket in batches, in the order they were made, and announces
 * each to its room once stored.
 */
import { db } from "../../db/client";
import { AppError, isDependencyDown } from "../../core/errors";
import { admitChatBytes, type ChatStorage, readChatStorage } from "../limits";
import type { Actor } from "../auth";
import { findMessage, viewOf } from "./messages";
import { type Message, type NewMessage, POLL_OPTIONS_MAX, POLL_OPTIONS_MIN } from "./model";
import { broadcastsHandedOn } from "../../realtime";
import { admitted, announceToRoom, findRoom, type RoomRow } from "./rooms";
import { chatMessages, chatPollOptions } from "./schema";
import { rememberUser } from "./users";

/**
 * Words of a content type that ask a client to run the content as markup or code. A message's
 * content is text whatever its type (docs/chat.md): a type such as text/html would invite a
 * client to put another user's words into a page, so it is refused rather than stored.
 */
const ACTIVE_WORDS = new Set(["html", "xhtml", "svg", "xml", "xsl", "xslt", "javascript", "ecmascript", "js"]);

interface Draft {
  content: string;
  contentType: string;
  options: string[] | undefined;
  parentId: number | null;
}

/**
 * The draft a `new_message` makes, its shape already checked against its model: what remains
 * are the rules between its fields, and a content type that names markup or script.
 */
function draftOf(message: NewMessage): Draft {
  const contentType = message.content_type ?? "text";
  const active = contentType.split(/[/+._-]/).find((word) => ACTIVE_WORDS.has(word));
  if (active !== undefined) {
    throw new AppError(
      "validation_failed",
      `content_type: ${contentType} names ${active}; content is shown as text, so markup and script types are refused`,
    );
  }
  if (contentType !== "poll") {
    if (message.options !== undefined) throw new AppError("validation_failed", "options: only a poll has options");
    return { content: message.content, contentType, options: undefined, parentId: message.parent_id ?? null };
  }
  if (message.options === undefined) {
    throw new AppError("validation_failed", `options: a poll has ${POLL_OPTIONS_MIN} to ${POLL_OPTIONS_MAX} options`);
  }
  const options = message.options.map((option) => option.trim());
  if (new Set(options).size !== options.length) {
    throw new AppError("validation_failed", "options: the options must differ");
  }
  return { content: message.content, contentType, options, parentId: message.parent_id ?? null };
}

/**
 * Stores a message (a poll when content_type is "poll"; a reply when parent_id is set),
 * broadcasts it as `new_message`, and resolves once both are done: a resolved post is a
 * stored message. Posts are written in the order they were made, together with whatever
 * else is waiting (see the writer below), and broadcast in that order.
 */
export async function postMessage(actor: Actor, channelId: string, message: NewMessage): Promise<Message> {
  const draft = draftOf(message);
  return new Promise((resolve, reject) => {
    waiting.push({ actor, channelId, draft, resolve, reject });
    if (!writing) {
      writing = true;
      // One turn of the event loop: the posts of frames read together are written together.
      setImmediate(writeWaiting);
    }
  });
}

interface Post {
  actor: Actor;
  channelId: string;
  draft: Draft;
  resolve(message: Message): void;
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
  for (const { actor } of batch)
    if (!storage.has(actor.accountId)) storage.set(actor.accountId, readChatStorage(actor.accountId));
  for (const read of storage.values()) read.catch(() => {}); // awaited below, unless no post gets that far
  const checked = await Promise.all(
    batch.map(async (post) => {
      try {
        const room = admitted(await roomOf(post), post.actor, post.channelId, "write");
        await rememberUser(post.actor);
        if (post.draft.parentId !== null) {
          const parent = await findMessage(room, post.draft.parentId);
          if (parent.parentId !== null)
            throw new AppError("validation_failed", "parent_id: a reply cannot have replies; answer its parent");
        }
        return { post, room };
      } catch (error) {
        post.reject(error);
        return undefined;
      }
    }),
  );
  const admittedPosts = await withinQuota(
    checked.filter((entry) => entry !== undefined),
    storage,
  );
  // Runs of plain messages share an INSERT; a poll is written alone, in its place.
  for (let start = 0; start < admittedPosts.length; ) {
    let end = start + 1;
    if (!admittedPosts[start]!.post.draft.options)
      while (end < admittedPosts.length && !admittedPosts[end]!.post.draft.options) end++;
    const run = admittedPosts.slice(start, end);
    start = end;
    let messages: Array<Message | Error>;
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
      // Not awaited one by one: this process's sockets have it when the call returns, and
      // copies for other processes keep their order on one connection.
      announceToRoom(post.actor.accountId, post.channelId, "new_message", message);
    }
    // Acknowledged once the copies for other processes are with Redis (bounded, never failing):
    // a process killed right after acknowledging has then not taken them down with it.
    await broadcastsHandedOn();
    for (const [i, { post }] of run.entries()) {
      const message = messages[i]!;
      if (!(message instanceof Error)) post.resolve(message);
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
async function storeMessages(run: Admitted[]): Promise<Array<Message | Error>> {
  try {
    const rows = (await db.insert(chatMessages).values(run.map(rowOf)).returning()).sort((a, b) => a.id - b.id);
    // A new message has no replies or votes yet, so its view is built without reading back.
    return rows.map((row, i) => viewOf(run[i]!.room, row, 0, []));
  } catch (error) {
    if (run.length === 1 || isDependencyDown(error)) throw error;
    const one: Array<Message | Error> = [];
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

async function storePoll(entry: Admitted): Promise<Message> {
  const options = entry.post.draft.options!;
  return db.transaction(async (tx) => {
    const [row] = await tx.insert(chatMessages).values(rowOf(entry)).returning();
    const stored = await tx
      .insert(chatPollOptions)
      .values(
        options.map((text, position) => ({
          accountId: entry.post.actor.accountId,
          messageId: row!.id,
          position,
          text,
        })),
      )
      .returning({ id: chatPollOptions.id, text: chatPollOptions.text, position: chatPollOptions.position });
    const ordered = stored.sort((a, b) => a.position - b.position).map(({ id, text }) => ({ id, text, vote_count: 0 }));
    return viewOf(entry.room, row!, 0, ordered);
  });
}
