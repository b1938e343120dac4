import { sql } from "drizzle-orm";
import {
  type AnyPgColumn,
  index,
  integer,
  pgTable,
  primaryKey,
  serial,
  text,
  timestamp,
  uniqueIndex,
} from "drizzle-orm/pg-core";
import { accountIdColumn } from "../accounts/schema";

/** The account's end users as chat knows them: made on a token's first use, renamed when the token's name changes. */
export const chatUsers = pgTable(
  "chat_users",
  {
    /** The numeric id rooms name as `owner_id`. */
    id: serial("id").primaryKey(),
    accountId: accountIdColumn(),
    /** The token's `context.user.id`. */
    userId: text("user_id").notNull(),
    name: text("name").notNull().default(""),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [
    uniqueIndex("chat_users_account_user_idx").on(table.accountId, table.userId),
    // Trigram indexes keep case-insensitive substring search fast on large accounts.
    index("chat_users_name_trgm_idx").using("gin", table.name.op("gin_trgm_ops")),
    index("chat_users_user_id_trgm_idx").using("gin", table.userId.op("gin_trgm_ops")),
  ],
);

export const chatRooms = pgTable(
  "chat_rooms",
  {
    id: serial("id").primaryKey(),
    accountId: accountIdColumn(),
    /** The client's name for the room, unique in the account (`session_id` in responses). */
    channelId: text("channel_id").notNull(),
    createdBy: text("created_by").notNull(),
    ownerId: integer("owner_id")
      .notNull()
      .references(() => chatUsers.id),
    /** Empty: every user of the account may read and post. */
    allowedUserIds: text("allowed_user_ids").array().notNull().default(sql`'{}'::text[]`),
    status: text("status").notNull().default("active"),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [uniqueIndex("chat_rooms_account_channel_idx").on(table.accountId, table.channelId)],
);

export const chatMessages = pgTable(
  "chat_messages",
  {
    id: serial("id").primaryKey(),
    accountId: accountIdColumn(),
    roomId: integer("room_id")
      .notNull()
      .references(() => chatRooms.id, { onDelete: "cascade" }),
    /** Set on a reply; replies go with their parent. */
    parentId: integer("parent_id").references((): AnyPgColumn => chatMessages.id, { onDelete: "cascade" }),
    /** The text, or a poll's question. */
    content: text("content").notNull(),
    contentType: text("content_type").notNull().default("text"),
    createdBy: text("created_by").notNull(),
    createdByName: text("created_by_name").notNull(),
    insertedAt: timestamp("inserted_at", { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp("updated_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [
    index("chat_messages_room_top_idx").on(table.roomId, table.id).where(sql`${table.parentId} is null`),
    index("chat_messages_parent_idx").on(table.parentId, table.id),
    index("chat_messages_room_author_idx").on(table.roomId, table.createdBy),
    index("chat_messages_content_trgm_idx").using("gin", table.content.op("gin_trgm_ops")),
  ],
);

export const chatPollOptions = pgTable(
  "chat_poll_options",
  {
    id: serial("id").primaryKey(),
    accountId: accountIdColumn(),
    messageId: integer("message_id")
      .notNull()
      .references(() => chatMessages.id, { onDelete: "cascade" }),
    position: integer("position").notNull(),
    text: text("text").notNull(),
  },
  (table) => [index("chat_poll_options_message_idx").on(table.messageId, table.position)],
);

export const chatPollVotes = pgTable(
  "chat_poll_votes",
  {
    accountId: accountIdColumn(),
    messageId: integer("message_id")
      .notNull()
      .references(() => chatMessages.id, { onDelete: "cascade" }),
    userId: text("user_id").notNull(),
    optionId: integer("option_id")
      .notNull()
      .references(() => chatPollOptions.id, { onDelete: "cascade" }),
    votedAt: timestamp("voted_at", { withTimezone: true }).notNull().defaultNow(),
  },
  // One answer per user and poll: a second vote replaces the first.
  (table) => [primaryKey({ columns: [table.messageId, table.userId] })],
);
