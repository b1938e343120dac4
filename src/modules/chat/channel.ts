/**
 * The `chat:<channel_id>` socket channel: a room the user may enter, its latest messages on
 * join, `user_joined` and `user_left` to the others, and the pushes `new_message` and
 * `new_vote`, and the `rtc:<channel_id>` relay beside it. Registered with the socket where the
 * app is assembled.
 */
import { AppError } from "../../core/errors";
import type { Static } from "elysia";
import { type Answer, type Channel, type Member, relayChannel } from "../../realtime";
import type { Actor } from "../auth";
import { HISTORY_ON_JOIN, messagesAfter, recentMessages } from "./messages";
import { ChannelId, ChatEvents } from "./model";
import { vote } from "./polls";
import { postMessage, withdrawWaitingPosts } from "./posting";
import { CHAT_TOPIC_PREFIX, roomAccess } from "./rooms";

const userView = ({ actor }: Member) => ({ user: { id: actor.userId, name: actor.name || actor.userId } });

type ChatEvent = keyof typeof ChatEvents;

/** Each event's answer, one per model: an event given a model but no answer does not compile. */
const answers: { [E in ChatEvent]: (member: Member, payload: Static<(typeof ChatEvents)[E]>) => Promise<Answer> } = {
  // Written with whatever else waits to be stored, so the next
  // frame does not wait for it; the reply follows the row.
  new_message: async (member, message) => ({
    later: postMessage(member.actor, member.name, message).then((stored) => ({ message: stored })),
  }),
  new_vote: async (member, { message_id, answer }) => ({
    reply: { poll_answer: await vote(member.actor, member.name, message_id, answer) },
  }),
};

/** The topic's name is a room's channel id, on `chat:` and on `rtc:` alike. */
const TOPIC_NAME = { field: "channel_id", model: ChannelId };

export const chatChannel: Channel = {
  prefix: CHAT_TOPIC_PREFIX,
  models: { name: TOPIC_NAME, events: ChatEvents },
  async join(actor, channelId) {
    // Read here, before the socket hears the room, it also admits the actor: a refused caller hears nothing.
    const { room, messages: first } = await recentMessages(actor, channelId);
    return async (member) => {
      // The greeting runs once the socket hears the room: a message stored between the first read and
      // then was told to nobody here, so it is read now. One stored since the first read and told
      // after the socket began to hear may come twice, live and in the history (same id): never lost.
      const later = await messagesAfter(room, first.at(-1)?.id ?? 0);
      const history = [...first, ...later].slice(-HISTORY_ON_JOIN);
      member.push("archived_message_count", { count: history.length });
      for (const message of history) member.push("archived_message", message);
      if (member.listed) await member.broadcast("user_joined", userView(member));
    };
  },
  /** The socket passes only the events of ChatEvents, each payload admitted by its model (src/realtime/payloads.ts). */
  push: (member, event, payload) => answers[event as ChatEvent](member, payload as never),
  async leave(member) {
    if (member.listed) await member.broadcast("user_left", userView(member));
  },
  drain(reason) {
    withdrawWaitingPosts(reason);
  },
};

/** rtc topics share names with rooms: one needs a room the user may enter only when a room of that name exists. */
async function admitToRelay(actor: Actor, channelId: string): Promise<void> {
  if ((await roomAccess(actor, channelId)) === "forbidden") {
    throw new AppError("forbidden", `user "${actor.userId}" may not enter room "${channelId}"`);
  }
}

/** The `rtc:<channel_id>` relay: it stores nothing, and admits those the room of that name would. */
export const rtcChannel = relayChannel(admitToRelay, TOPIC_NAME);
