/**
 * The `chat:<channel_id>` socket channel: a room the user may enter, its latest messages on
 * join, `user_joined` and `user_left` to the others, and the pushes `new_message` and
 * `new_vote`. Registered with the socket where the app is assembled.
 */
import { AppError } from "../../core/errors";
import type { Channel, Member } from "../../realtime/channel";
import type { Actor } from "../auth/actor";
import { positiveInt } from "./checks";
import { HISTORY_ON_JOIN, messagesAfter, recentMessages } from "./messages";
import { vote } from "./polls";
import { postMessage, withdrawWaitingPosts } from "./posting";
import { CHAT_TOPIC_PREFIX, roomAccess } from "./rooms";

const userView = ({ actor }: Member) => ({ user: { id: actor.userId, name: actor.name || actor.userId } });

export const chatChannel: Channel = {
  prefix: CHAT_TOPIC_PREFIX,
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
  async push(member, event, payload) {
    switch (event) {
      case "new_message":
        // Written with whatever else waits to be stored, so the next
        // frame does not wait for it; the reply follows the row.
        return { later: postMessage(member.actor, member.name, payload ?? {}).then((message) => ({ message })) };
      case "new_vote": {
        const { message_id, answer }: { message_id?: unknown; answer?: unknown } = payload ?? {};
        return {
          reply: {
            poll_answer: await vote(
              member.actor,
              member.name,
              positiveInt("message_id", message_id),
              positiveInt("answer", answer),
            ),
          },
        };
      }
      default:
        throw new AppError("bad_request", `unknown event "${event}" on a chat topic; send new_message or new_vote`);
    }
  },
  async leave(member) {
    if (member.listed) await member.broadcast("user_left", userView(member));
  },
  drain(reason) {
    withdrawWaitingPosts(reason);
  },
};

/** rtc topics share names with rooms: one needs a room the user may enter only when a room of that name exists. */
export async function admitToRelay(actor: Actor, channelId: string): Promise<void> {
  if ((await roomAccess(actor, channelId)) === "forbidden") {
    throw new AppError("forbidden", `user "${actor.userId}" may not enter room "${channelId}"`);
  }
}
