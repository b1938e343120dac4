/**
 * Chat's wire types, once: the TypeBox models that validate requests and socket pushes and
 * describe responses in the OpenAPI reference, and (as `typeof Model.static`) the types the
 * services take and return. A model's `REASON` is what both the REST answer and the socket's
 * error reply say after the field's name.
 */
import { t } from "elysia";
import { Name, REASON, Text } from "../../http/text";

export const PAGE_SIZE_DEFAULT = 20;
export const PAGE_SIZE_MAX = 100;
export const CONTENT_MAX_CHARS = 10_000;
export const SEARCH_TERM_MAX_CHARS = 200;
export const ROOM_STATUSES = ["active", "inactive"] as const;
export type RoomStatus = (typeof ROOM_STATUSES)[number];
export const MAX_INT = 2_147_483_647;
export const POLL_OPTIONS_MIN = 2;
export const POLL_OPTIONS_MAX = 20;
const POLL_OPTION_MAX_CHARS = 200;
/** At least one character that is not white space (JavaScript's `\s` is what `trim()` removes). */
const NOT_BLANK = "\\S";

const WHOLE_NUMBER = `a whole number from 1 to ${MAX_INT}`;
export const Id = t.Integer({ minimum: 1, maximum: MAX_INT, [REASON]: WHOLE_NUMBER });
/**
 * A room's name in every REST path (`/rooms/{channel_id}/...`) and in its socket topics
 * (`chat:<channel_id>`, `rtc:<channel_id>`): a `/` would split the path, so it is refused
 * everywhere, as are control characters (a Name).
 */
export const ChannelId = Name({
  minLength: 1,
  maxLength: 128,
  pattern: "^[^/]*$",
  description: "The room's channel id: no / and no control characters",
  [REASON]: "1 to 128 characters, without slashes or control characters",
});
export const UserId = Name({
  minLength: 1,
  maxLength: 256,
  [REASON]: "1 to 256 characters, without control characters",
});
const Content = Text({
  minLength: 1,
  maxLength: CONTENT_MAX_CHARS,
  pattern: NOT_BLANK,
  [REASON]: `a string of 1 to ${CONTENT_MAX_CHARS} characters, not only white space`,
});

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
  pattern: NOT_BLANK,
  description: "Case-insensitive; % and _ match themselves",
  [REASON]: `1 to ${SEARCH_TERM_MAX_CHARS} characters, not only white space`,
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
  editMessage: t.Object({ content: t.Optional(Content) }),
};

/**
 * The payload of each event a client pushes on `chat:<channel_id>`, checked by the socket before
 * the chat channel sees it (src/realtime/payloads.ts). Members not named here are ignored. What
 * depends on several fields or on the room (a poll's options, a content type naming markup, a
 * reply to a reply) is the posting service's to judge.
 */
export const ChatEvents = {
  new_message: t.Object({
    content: Content,
    content_type: t.Optional(
      t.String({
        pattern: "^[a-z][a-z0-9_.+/-]{0,63}$",
        [REASON]: "lower-case letters, digits and _ . + / -, at most 64 characters",
      }),
    ),
    options: t.Optional(
      t.Array(
        Text({
          minLength: 1,
          maxLength: POLL_OPTION_MAX_CHARS,
          pattern: NOT_BLANK,
          [REASON]: `each option is a non-empty string of at most ${POLL_OPTION_MAX_CHARS} characters`,
        }),
        {
          minItems: POLL_OPTIONS_MIN,
          maxItems: POLL_OPTIONS_MAX,
          [REASON]: `a poll has ${POLL_OPTIONS_MIN} to ${POLL_OPTIONS_MAX} options`,
        },
      ),
    ),
    parent_id: t.Optional(t.Union([Id, t.Null()], { [REASON]: `null, or ${WHOLE_NUMBER}` })),
  }),
  new_vote: t.Object({ message_id: Id, answer: Id }),
};
export type NewMessage = typeof ChatEvents.new_message.static;

export type Room = typeof Room.static;
export type PollOption = typeof PollOption.static;
export type Message = typeof Message.static;
export type DayOfMessages = typeof DayOfMessages.static;
export type MessageList = typeof MessageList.static;
export type User = typeof User.static;
export type PollVote = typeof PollVote.static;
