import {
  bigserial,
  boolean,
  date,
  index,
  integer,
  jsonb,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
} from "drizzle-orm/pg-core";
import { accountIdColumn } from "../accounts/schema";

/**
 * One life of a conference room, from muc-room-created to muc-room-destroyed. A room name is
 * reused by later meetings, so a life is named by the room, its breakout id ("" for the main
 * room) and the creation second the source reports in both events.
 */
export const roomSessions = pgTable(
  "room_sessions",
  {
    id: bigserial("id", { mode: "number" }).primaryKey(),
    accountId: accountIdColumn(),
    room: text("room").notNull(),
    breakoutId: text("breakout_id").notNull().default(""),
    roomJid: text("room_jid"),
    startedAt: timestamp("started_at", { withTimezone: true }).notNull(),
    endedAt: timestamp("ended_at", { withTimezone: true }),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp("updated_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [
    uniqueIndex("room_sessions_key_idx").on(table.accountId, table.room, table.breakoutId, table.startedAt),
    index("room_sessions_time_idx").on(table.accountId, table.startedAt),
  ],
);

/**
 * One stay of one connection in a room. event_sync repeats the occupant jid and the join
 * second in the leave, so both halves name the same row whichever arrives first: that key is
 * the primary key, led by the room and the join so it also serves a room's stays by time, and
 * the table has one other index, so writing a stay touches two. Its pages keep room
 * (fillfactor 60, set in the migration), so the leave's update, which changes no indexed
 * column, is a heap-only update. The account is no foreign key: its check per stay cost about
 * half of writing the stay. A trigger on accounts deletes an account's stays with it, as the
 * cascade did, and the fold locks each account of its page once, as the check did (migration 0027).
 */
export const participantSessions = pgTable(
  "participant_sessions",
  {
    accountId: text("account_id").notNull(),
    room: text("room").notNull(),
    breakoutId: text("breakout_id").notNull().default(""),
    occupantJid: text("occupant_jid").notNull(),
    userId: text("user_id"),
    name: text("name"),
    email: text("email"),
    joinedAt: timestamp("joined_at", { withTimezone: true }).notNull(),
    leftAt: timestamp("left_at", { withTimezone: true }),
    /** True when no leave was reported and the stay was closed at the room's end. */
    leftEstimated: boolean("left_estimated").notNull().default(false),
    updatedAt: timestamp("updated_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [
    primaryKey({ columns: [table.accountId, table.room, table.joinedAt, table.breakoutId, table.occupantJid] }),
    // The report over every room reads an account's stays by join time alone.
    index("participant_sessions_account_time_idx").on(table.accountId, table.joinedAt),
  ],
);

export type MediaKind = "streaming" | "recording" | "phone";
/** What a phone call's events said about it; empty for streams and recordings. */
export interface CallDetails {
  caller?: string | null;
  callee?: string | null;
  answered?: boolean;
  reason?: string | null;
}

/** A stream, a recording or an answered phone call: an interval in a room, named by its subject. */
export const mediaSessions = pgTable(
  "media_sessions",
  {
    id: bigserial("id", { mode: "number" }).primaryKey(),
    accountId: accountIdColumn(),
    room: text("room").notNull(),
    kind: text("kind").$type<MediaKind>().notNull(),
    /** Stream name, or the SIP Call-ID of a phone call. */
    subject: text("subject").notNull(),
    startedAt: timestamp("started_at", { withTimezone: true }).notNull(),
    endedAt: timestamp("ended_at", { withTimezone: true }),
    peakViewers: integer("peak_viewers").notNull().default(0),
    /** Phone calls: caller, callee, answered, reason. */
    details: jsonb("details").$type<CallDetails>().notNull().default({}),
  },
  (table) => [
    uniqueIndex("media_sessions_key_idx").on(table.accountId, table.kind, table.subject, table.startedAt),
    index("media_sessions_subject_idx").on(table.accountId, table.subject),
    index("media_sessions_room_idx").on(table.accountId, table.room, table.startedAt),
  ],
);

/** Usage per room name and UTC day, rebuilt from the session tables for each day a fold touches. */
export const roomUsageDaily = pgTable(
  "room_usage_daily",
  {
    accountId: accountIdColumn(),
    room: text("room").notNull(),
    day: date("day", { mode: "string" }).notNull(),
    participantSeconds: integer("participant_seconds").notNull().default(0),
    peakParticipants: integer("peak_participants").notNull().default(0),
    distinctParticipants: integer("distinct_participants").notNull().default(0),
    phoneSeconds: integer("phone_seconds").notNull().default(0),
    streamingSeconds: integer("streaming_seconds").notNull().default(0),
    recordingSeconds: integer("recording_seconds").notNull().default(0),
    peakViewers: integer("peak_viewers").notNull().default(0),
    updatedAt: timestamp("updated_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [
    primaryKey({ columns: [table.accountId, table.room, table.day] }),
    index("room_usage_daily_day_idx").on(table.accountId, table.day),
  ],
);
