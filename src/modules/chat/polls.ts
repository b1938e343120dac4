/** Polls: a poll is a message with options (see posting.ts); each user holds one answer, replaced by voting again. */
import { and, asc, eq, sql } from "drizzle-orm";
import { db } from "../../db/client";
import { AppError } from "../../core/errors";
import type { Actor } from "../auth";
import { findMessage, type MessageRow, present } from "./messages";
import type { PollVote } from "./model";
import { announceToRoom, enterRoom, type RoomRow } from "./rooms";
import { chatPollOptions, chatPollVotes } from "./schema";

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
    .where(
      and(
        eq(chatPollVotes.accountId, actor.accountId),
        eq(chatPollVotes.messageId, messageId),
        eq(chatPollVotes.userId, actor.userId),
      ),
    );
  return vote !== undefined;
}

export async function pollVotes(actor: Actor, channelId: string, messageId: number): Promise<PollVote[]> {
  const room = await enterRoom(actor, channelId);
  await findPoll(room, messageId);
  return db
    .select({ answer: chatPollVotes.optionId, user_id: chatPollVotes.userId })
    .from(chatPollVotes)
    .where(and(eq(chatPollVotes.accountId, actor.accountId), eq(chatPollVotes.messageId, messageId)))
    .orderBy(asc(chatPollVotes.votedAt), asc(chatPollVotes.userId));
}

/** Sets the actor's one answer to a poll (replacing an earlier one) and broadcasts `new_vote` with the new tallies. */
export async function vote(actor: Actor, channelId: string, messageId: number, optionId: number): Promise<PollVote> {
  const room = await enterRoom(actor, channelId, "write");
  await findPoll(room, messageId);
  const [option] = await db
    .select({ id: chatPollOptions.id })
    .from(chatPollOptions)
    .where(
      and(
        eq(chatPollOptions.accountId, actor.accountId),
        eq(chatPollOptions.messageId, messageId),
        eq(chatPollOptions.id, optionId),
      ),
    );
  if (!option) throw new AppError("validation_failed", `option ${optionId} is not an option of poll ${messageId}`);
  await db
    .insert(chatPollVotes)
    .values({ accountId: actor.accountId, messageId, userId: actor.userId, optionId })
    .onConflictDoUpdate({
      target: [chatPollVotes.messageId, chatPollVotes.userId],
      set: { optionId, votedAt: sql`now()` },
    });
  const answer = { answer: optionId, user_id: actor.userId };
  const [poll] = await present(room, [await findMessage(room, messageId)]);
  await announceToRoom(actor.accountId, channelId, "new_vote", {
    message_id: messageId,
    ...answer,
    options: poll!.options,
  });
  return answer;
}
