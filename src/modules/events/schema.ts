import { sql } from "drizzle-orm";
import { bigserial, index, jsonb, pgTable, text, timestamp, uniqueIndex } from "drizzle-orm/pg-core";
import { accountIdColumn } from "../accounts/schema";

/** Append-only log of what happened in an account's conferences; the usage report folds it. */
export const conferenceEvents = pgTable(
  "conference_events",
  {
    id: bigserial("id", { mode: "number" }).primaryKey(),
    accountId: accountIdColumn(),
    kind: text("kind").notNull(),
    room: text("room").notNull(),
    /** When it happened at the source, which may be long before it reached Parley. */
    occurredAt: timestamp("occurred_at", { withTimezone: true }).notNull(),
    /** The participant, call or stream the event is about, when there is one. */
    subject: text("subject"),
    payload: jsonb("payload").$type<Record<string, unknown>>().notNull().default({}),
    /** Identifies a delivery, so a repeated one is stored once. */
    dedupeKey: text("dedupe_key").notNull(),
    receivedAt: timestamp("received_at", { withTimezone: true }).notNull().defaultNow(),
    /**
     * Set by the fold's own transaction. The fold job in Redis is only a doorbell: whatever is
     * still null after a Redis crash is found by the cdr sweep, so an acknowledged event is
     * always folded.
     */
    foldedAt: timestamp("folded_at", { withTimezone: true }),
  },
  (table) => [
    uniqueIndex("conference_events_dedupe_idx").on(table.accountId, table.dedupeKey),
    index("conference_events_room_idx").on(table.accountId, table.room, table.occurredAt),
    // Streams and calls are refolded from all events about one subject (stream name, Call-ID).
    index("conference_events_subject_idx").on(table.accountId, table.subject),
    // Holds only the events not folded yet, so the sweep's scan stays small however long the log.
    index("conference_events_unfolded_idx").on(table.id).where(sql`${table.foldedAt} is null`),
    // A room's fold job reads the room's unfolded events.
    index("conference_events_unfolded_room_idx").on(table.accountId, table.room, table.id).where(sql`${table.foldedAt} is null`),
  ],
);
