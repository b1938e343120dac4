import { bigint, bigserial, index, jsonb, pgTable, text, timestamp, uniqueIndex } from "drizzle-orm/pg-core";
import { accountIdColumn } from "../accounts/schema";
import type { Occupant } from "./event-sync";

/** Kinds that describe one stream or call, named by subject, rather than a conference room. */
export const MEDIA_EVENT_KINDS = [
  "stream_started",
  "stream_stopped",
  "recording_started",
  "recording_stopped",
  "call_started",
  "call_ended",
  "viewers_changed",
] as const;

export const EVENT_KINDS = [
  "room_created",
  "room_destroyed",
  "occupant_joined",
  "occupant_left",
  ...MEDIA_EVENT_KINDS,
] as const;
export type EventKind = (typeof EVENT_KINDS)[number];

/** Append-only log of what happened in an account's conferences; the usage report folds it. */
export const conferenceEvents = pgTable(
  "conference_events",
  {
    id: bigserial("id", { mode: "number" }).primaryKey(),
    accountId: accountIdColumn(),
    kind: text("kind").$type<EventKind>().notNull(),
    room: text("room").notNull(),
    /** When it happened at the source, which may be long before it reached Parley. */
    occurredAt: timestamp("occurred_at", { withTimezone: true }).notNull(),
    /** The participant, call or stream the event is about, when there is one. */
    subject: text("subject"),
    /** The body as it was delivered, for audit; the fold and the catalogue read the columns below. */
    payload: jsonb("payload").$type<Record<string, unknown>>().notNull().default({}),
    /** Of a conference event (./event-sync.ts): the breakout room's id, or "" for the main room. */
    breakoutId: text("breakout_id").notNull().default(""),
    roomJid: text("room_jid"),
    /** The room life's start and end that a room_created or room_destroyed names. */
    startedAt: timestamp("started_at", { withTimezone: true }),
    endedAt: timestamp("ended_at", { withTimezone: true }),
    /** The stays a join, a leave or a destroyed room names, always a list. */
    occupants: jsonb("occupants").$type<Occupant[]>().notNull().default([]),
    /** Identifies a delivery, so a repeated one is stored once. */
    dedupeKey: text("dedupe_key").notNull(),
    receivedAt: timestamp("received_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [
    uniqueIndex("conference_events_dedupe_idx").on(table.accountId, table.dedupeKey),
    index("conference_events_room_idx").on(table.accountId, table.room, table.occurredAt),
    // Streams and calls are refolded from all events about one subject (stream name, Call-ID).
    index("conference_events_subject_idx").on(table.accountId, table.subject),
  ],
);

/** An event as stored, without the bookkeeping of its delivery. */
export type StoredEvent = Pick<
  typeof conferenceEvents.$inferSelect,
  "id" | "accountId" | "kind" | "room" | "occurredAt" | "subject" | "payload"
>;

/**
 * The events not folded yet: a trigger on conference_events (in the migration) lists every
 * stored event here in the statement that stores it, whoever writes it, and the fold's
 * transaction deletes the row, so an event is folded exactly when it is no longer listed
 * here and the log itself is never updated. It is the work table of the outbox's "cdr"
 * consumer (src/core/outbox.ts), whose ring is only a doorbell: what is left here after a
 * lost ring is found by the cdr sweep, so an acknowledged event is always folded. Narrow, so
 * claiming and clearing a page never touches the log's wide rows or indexes.
 */
export const conferenceEventsUnfolded = pgTable(
  "conference_events_unfolded",
  {
    eventId: bigint("event_id", { mode: "number" })
      .primaryKey()
      .references(() => conferenceEvents.id, { onDelete: "cascade" }),
    accountId: text("account_id").notNull(),
    room: text("room").notNull(),
  },
  // A rung room's fold reads the room's unfolded events. The event id is no column of this index:
  // the list is mostly empty, so autovacuum's analyze often leaves it counted as empty, and with the
  // id in it the planner then answered the claims' conditions on the id by scanning this whole
  // index, once per id asked for (minutes per claim for a burst of 20,000 events).
  (table) => [index("conference_events_unfolded_room_idx").on(table.accountId, table.room)],
);
