/** Chat over REST: rooms, messages and replies, polls and users (spec 4.4). New messages arrive over the socket. */
import { Elysia, t } from "elysia";
import { errorResponses } from "../../http/errors";
import { actorFrom, auth } from "../auth";
import { limits } from "../limits";
import {
  deleteMessages,
  deleteReplies,
  editMessage,
  getMessage,
  listMessages,
  listReplies,
  parseMessageIds,
  searchMessages,
} from "./messages";
import { ChannelId, Id, MessagingModel, UserId } from "./model";
import { isVoted, pollVotes, vote } from "./polls";
import { addRoomUser, createRoom, getRoom, listRooms, removeRoomUser, roomUser, roomUsers } from "./rooms";
import { searchUsers } from "./users";

const {
  room: Room,
  message: Message,
  messageList: MessageList,
  user: User,
  pollVote: PollVote,
  confirmation: Confirmation,
} = MessagingModel;

const roomParams = t.Object({ channel_id: ChannelId });
const messageParams = t.Object({ channel_id: ChannelId, message_id: Id });
const userParams = t.Object({ channel_id: ChannelId, user_id: UserId });
const ROOM_ERRORS = errorResponses(400, 401, 403, 404, 422);

export const chatController = new Elysia({ name: "parley.chat", detail: { tags: ["messaging"] } })
  .use(auth)
  .use(limits)
  .guard({ bearer: "messaging", limit: "messaging" }, (app) =>
    app
      .get("/api/v1/messaging/rooms", async ({ session }) => ({ rooms: await listRooms(actorFrom(session)) }), {
        response: { 200: t.Object({ rooms: t.Array(Room) }), ...errorResponses(401, 403) },
        detail: { summary: "Rooms the user may enter" },
      })
      .post(
        "/api/v1/messaging/rooms/create",
        async ({ session, body, set }) => {
          const room = await createRoom(actorFrom(session), {
            channelId: body.channel_id,
            allowedUserIds: body.allowed_user_ids,
            status: body.status,
          });
          set.status = 201;
          return { room };
        },
        {
          body: MessagingModel.createRoom,
          response: { 201: t.Object({ room: Room }), ...errorResponses(400, 401, 403, 409, 422) },
          detail: { summary: "Create a room owned by the user" },
        },
      )
      .get(
        "/api/v1/messaging/rooms/:channel_id",
        async ({ session, params }) => ({ room: await getRoom(actorFrom(session), params.channel_id) }),
        {
          params: roomParams,
          response: { 200: t.Object({ room: Room }), ...ROOM_ERRORS },
          detail: { summary: "One room" },
        },
      )
      .get(
        "/api/v1/messaging/rooms/:channel_id/messages",
        async ({ session, params, query }) =>
          listMessages(actorFrom(session), params.channel_id, {
            size: query.size,
            offset: query.offset,
            messageIds: query.message_ids === undefined ? undefined : parseMessageIds("message_ids", query.message_ids),
            groupByDay: query.group_by_day,
          }),
        {
          params: roomParams,
          query: MessagingModel.listQuery,
          response: { 200: MessageList, ...ROOM_ERRORS },
          detail: { summary: "Top-level messages, newest first (or the given message_ids)" },
        },
      )
      .delete(
        "/api/v1/messaging/rooms/:channel_id/messages",
        async ({ session, params, body }) => ({
          message: await deleteMessages(actorFrom(session), params.channel_id, {
            isEmpty: body.is_empty,
            messageIds: body.message_ids,
          }),
        }),
        {
          params: roomParams,
          body: MessagingModel.deleteMessages,
          response: { 200: Confirmation, ...ROOM_ERRORS },
          detail: { summary: "Delete messages (with their replies), or all of the room's with is_empty" },
        },
      )
      .get(
        "/api/v1/messaging/rooms/:channel_id/messages/search",
        async ({ session, params, query }) =>
          searchMessages(actorFrom(session), params.channel_id, query.search_term, {
            size: query.size,
            offset: query.offset,
          }),
        {
          params: roomParams,
          query: MessagingModel.searchQuery,
          response: { 200: MessageList, ...ROOM_ERRORS },
          detail: { summary: "Messages and replies containing the term, newest first" },
        },
      )
      .get(
        "/api/v1/messaging/rooms/:channel_id/messages/:message_id",
        async ({ session, params }) => getMessage(actorFrom(session), params.channel_id, params.message_id),
        { params: messageParams, response: { 200: Message, ...ROOM_ERRORS }, detail: { summary: "One message" } },
      )
      .put(
        "/api/v1/messaging/rooms/:channel_id/messages/:message_id",
        async ({ session, params, body }) =>
          editMessage(actorFrom(session), params.channel_id, params.message_id, body.content),
        {
          params: messageParams,
          body: MessagingModel.editMessage,
          response: { 200: Message, ...ROOM_ERRORS },
          detail: { summary: "Edit one's own message" },
        },
      )
      .get(
        "/api/v1/messaging/rooms/:channel_id/messages/:message_id/messages_replies",
        async ({ session, params, query }) =>
          listReplies(actorFrom(session), params.channel_id, params.message_id, {
            size: query.size,
            offset: query.offset,
            groupByDay: query.group_by_day,
          }),
        {
          params: messageParams,
          query: MessagingModel.repliesQuery,
          response: { 200: MessageList, ...ROOM_ERRORS },
          detail: { summary: "Replies to a message, newest first" },
        },
      )
      .delete(
        "/api/v1/messaging/rooms/:channel_id/messages/:message_id/messages_replies",
        async ({ session, params, body }) => ({
          message: await deleteReplies(
            actorFrom(session),
            params.channel_id,
            params.message_id,
            body.reply_message_ids,
          ),
        }),
        {
          params: messageParams,
          body: MessagingModel.deleteReplies,
          response: { 200: Confirmation, ...ROOM_ERRORS },
          detail: { summary: "Delete replies of a message" },
        },
      )
      .get(
        "/api/v1/messaging/rooms/:channel_id/messages/:message_id/poll/is_voted",
        async ({ session, params }) => ({
          is_voted: await isVoted(actorFrom(session), params.channel_id, params.message_id),
        }),
        {
          params: messageParams,
          response: { 200: t.Object({ is_voted: t.Boolean() }), ...ROOM_ERRORS },
          detail: { summary: "Whether the user has answered the poll" },
        },
      )
      .get(
        "/api/v1/messaging/rooms/:channel_id/messages/:message_id/poll/votes",
        async ({ session, params }) => ({
          votes: await pollVotes(actorFrom(session), params.channel_id, params.message_id),
        }),
        {
          params: messageParams,
          response: { 200: t.Object({ votes: t.Array(PollVote) }), ...ROOM_ERRORS },
          detail: { summary: "Every answer to the poll" },
        },
      )
      .post(
        "/api/v1/messaging/rooms/:channel_id/messages/:message_id/poll/:poll_option_id",
        async ({ session, params }) => ({
          poll_answer: await vote(actorFrom(session), params.channel_id, params.message_id, params.poll_option_id),
        }),
        {
          params: t.Object({ channel_id: ChannelId, message_id: Id, poll_option_id: Id }),
          response: { 200: t.Object({ poll_answer: PollVote }), ...ROOM_ERRORS },
          detail: { summary: "Set the user's answer to the poll (replaces an earlier one)" },
        },
      )
      .get(
        "/api/v1/messaging/rooms/:channel_id/users/:user_id",
        async ({ session, params }) => ({
          user: await roomUser(actorFrom(session), params.channel_id, params.user_id),
        }),
        {
          params: userParams,
          response: { 200: t.Object({ user: User }), ...ROOM_ERRORS },
          detail: { summary: "A user of the room" },
        },
      )
      .post(
        "/api/v1/messaging/rooms/:channel_id/users/:user_id",
        async ({ session, params }) => ({
          room: await addRoomUser(actorFrom(session), params.channel_id, params.user_id),
        }),
        {
          params: userParams,
          response: { 200: t.Object({ room: Room }), ...ROOM_ERRORS },
          detail: { summary: "Add a user to the room's allowed users (owner or moderator)" },
        },
      )
      .delete(
        "/api/v1/messaging/rooms/:channel_id/users/:user_id",
        async ({ session, params }) => ({
          room: await removeRoomUser(actorFrom(session), params.channel_id, params.user_id),
        }),
        {
          params: userParams,
          response: { 200: t.Object({ room: Room }), ...ROOM_ERRORS },
          detail: { summary: "Remove a user from the room's allowed users (owner or moderator)" },
        },
      )
      .get(
        "/api/v1/messaging/users/search",
        async ({ session, query }) => ({
          users: await searchUsers(actorFrom(session), query.search_term, { size: query.size, offset: query.offset }),
        }),
        {
          query: MessagingModel.searchQuery,
          response: { 200: t.Object({ users: t.Array(User) }), ...errorResponses(400, 401, 403, 422) },
          detail: { summary: "Users of the account whose name or id contains the term" },
        },
      )
      .get(
        "/api/v1/rooms/:channel_id/users",
        async ({ session, params }) => ({ users: await roomUsers(actorFrom(session), params.channel_id) }),
        {
          params: roomParams,
          response: { 200: t.Object({ users: t.Array(User) }), ...ROOM_ERRORS },
          detail: { summary: "Everyone in the room" },
        },
      ),
  );
