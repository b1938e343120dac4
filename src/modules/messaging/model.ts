/**
 * Chat's wire types, once: the TypeBox models that validate requests and describe responses
 * in the OpenAPI reference, and (as `typeof Model.static`) the types the services return.
 */
import { t } from "elysia";
import { Text } from "../../http/text";

export const PAGE_SIZE_DEFAULT = 20;
export const PAGE_SIZE_MAX = 100;
export const CONTENT_MAX_CHARS = 10_000;
export const SEARCH_TERM_MAX_CHARS = 200;
export const ROOM_STATUSES = ["active", "inactive"] as const;
export type RoomStatus = (typeof ROOM_STATUSES)[number];
export const MAX_INT = 2_147_483_647;

export const Id = t.Integer({ minimum: 1, maximum: MAX_INT });
export const ChannelId = Text({ minLength: 1, maxLength: 128, description: "The room's channel id" });
export const UserId = Text({ minLength: 1, maxLength: 256 });

const Room = t.Object({
  id: t.Integer(),
  app_id: t.String({ description: "The account" }),
  created_by: t.String({ description: "User id of the owner" }),
  owner_id: t.Integer({ description: "Numeric chat-user id of the owner" }),
  session_id: t.String({ description: "Equals the channel id" }),
  channel_id: t.String(),
  allowed_user_ids: t.Array(t.String(), { description: "Empty: anyone in the account" }),
  status: t.String({ examples: ["active", "inactive"] }),
  created_at: t.String({ format: "date-time" }),
});

const PollOption = t.Object({ id: t.Integer(), text: t.String(), vote_count: t.Integer() });

const Message = t.Object({
  id: t.Integer(),
  channel_id: t.String(),
  parent_id: t.Nullable(t.Integer()),
  content: t.String({ description: "The text, or a poll's question" }),
  content_type: t.String({ examples: ["text", "poll"] }),
  created_by: t.String(),
  created_by_name: t.String(),
  inserted_at: t.String({ format: "date-time" }),
  updated_at: t.String({ format: "date-time" }),
  reply_count: t.Optional(t.Integer({ description: "Top-level messages only" })),
  options: t.Optional(t.Array(PollOption, { description: "Polls only" })),
});

const DayOfMessages = t.Object({ day: t.String({ description: "UTC day, YYYY-MM-DD" }), messages: t.Array(Message) });

const MessageList = t.Union([
  t.Object({ messages: t.Array(Message) }),
  t.Object({ days: t.Array(DayOfMessages, { description: "With group_by_day=true" }) }),
]);

const User = t.Object({ id: t.String(), name: t.String() });
const PollVote = t.Object({ answer: t.Integer({ description: "Poll option id" }), user_id: t.String() });

const Size = t.Integer({
  minimum: 1,
  maximum: PAGE_SIZE_MAX,
  default: PAGE_SIZE_DEFAULT,
  description: `Default ${PAGE_SIZE_DEFAULT}, at most ${PAGE_SIZE_MAX}`,
});
const Offset = t.Integer({ minimum: 0, maximum: 1_000_000_000, default: 0 });
const SearchTerm = Text({
  minLength: 1,
  maxLength: SEARCH_TERM_MAX_CHARS,
  description: "Case-insensitive; % and _ match themselves",
});

export const MessagingModel = {
  room: Room,
  message: Message,
  pollOption: PollOption,
  dayOfMessages: DayOfMessages,
  messageList: MessageList,
  user: User,
  pollVote: PollVote,
  confirmation: t.Object({ message: t.String() }),
  createRoom: t.Object({
    channel_id: ChannelId,
    allowed_user_ids: t.Optional(t.Array(UserId, { maxItems: 1000 })),
    status: t.Optional(t.UnionEnum(ROOM_STATUSES)),
  }),
  listQuery: t.Object({
    size: t.Optional(Size),
    offset: t.Optional(Offset),
    message_ids: t.Optional(Text({ maxLength: 2000, description: "Comma-separated message ids" })),
    group_by_day: t.Optional(t.Boolean()),
  }),
  repliesQuery: t.Object({ size: t.Optional(Size), offset: t.Optional(Offset), group_by_day: t.Optional(t.Boolean()) }),
  searchQuery: t.Object({ search_term: SearchTerm, size: t.Optional(Size), offset: t.Optional(Offset) }),
  deleteMessages: t.Object({
    is_empty: t.Optional(t.Boolean({ description: "true deletes every message of the room" })),
    message_ids: t.Optional(t.Array(Id, { maxItems: PAGE_SIZE_MAX })),
  }),
  deleteReplies: t.Object({ reply_message_ids: t.Array(Id, { minItems: 1, maxItems: PAGE_SIZE_MAX }) }),
  editMessage: t.Object({ content: t.Optional(Text({ minLength: 1, maxLength: CONTENT_MAX_CHARS })) }),
};

export type Room = typeof Room.static;
export type PollOption = typeof PollOption.static;
export type Message = typeof Message.static;
export type DayOfMessages = typeof DayOfMessages.static;
export type MessageList = typeof MessageList.static;
export type User = typeof User.static;
export type PollVote = typeof PollVote.static;
