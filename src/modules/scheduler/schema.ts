import { sql } from "drizzle-orm";
import { doublePrecision, index, integer, pgTable, serial, text, timestamp, uniqueIndex } from "drizzle-orm/pg-core";
import { accountIdColumn } from "../accounts/schema";

/** A room booked ahead of time (spec 2.3). Times are kept as given and as the instants they mean. */
export const reservations = pgTable(
  "reservations",
  {
    id: serial("id").primaryKey(),
    accountId: accountIdColumn(),
    /** As the client gave it ("Design Review"). */
    name: text("name").notNull(),
    /** The room as Jitsi names it (core/room-key: `design%20review`); rooms are matched on it. */
    roomKey: text("room_key").notNull(),
    mailOwner: text("mail_owner").notNull(),
    /** Exactly as the client sent it, local to `timezone`. */
    startTime: text("start_time").notNull(),
    /** As the client sent it (the spec's "America/New York" spelling included). */
    timezone: text("timezone").notNull(),
    /** Minutes. */
    duration: doublePrecision("duration").notNull(),
    pin: text("pin"),
    startsAt: timestamp("starts_at", { withTimezone: true }).notNull(),
    endsAt: timestamp("ends_at", { withTimezone: true }).notNull(),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [index("reservations_account_room_key_idx").on(table.accountId, table.roomKey, table.startsAt)],
);

/**
 * A room that Prosody's mod_reservations was allowed to open (Jicofo's reservation
 * contract). At most one per room name is open (ended_at unset) at a time.
 */
export const conferences = pgTable(
  "conferences",
  {
    id: serial("id").primaryKey(),
    accountId: accountIdColumn(),
    /** The room's JID node as Prosody sent it, lower-cased (the module checks the answer against it). */
    name: text("name").notNull(),
    /** core/room-key of the node; rooms are matched on it. */
    roomKey: text("room_key").notNull(),
    /** The bare JID Prosody sent for the user who opened the room. */
    mailOwner: text("mail_owner").notNull(),
    /** As answered to Prosody: what it sent, or the reservation's start in UTC. */
    startTime: text("start_time").notNull(),
    startsAt: timestamp("starts_at", { withTimezone: true }).notNull(),
    /** Seconds, as the Jicofo contract counts them. */
    durationSeconds: integer("duration_seconds").notNull(),
    endsAt: timestamp("ends_at", { withTimezone: true }).notNull(),
    /** Set when Prosody destroys the room, or when the room outlived its time without being destroyed. */
    endedAt: timestamp("ended_at", { withTimezone: true }),
    reservationId: integer("reservation_id").references(() => reservations.id, { onDelete: "set null" }),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [
    uniqueIndex("conferences_open_room_key").on(table.accountId, table.roomKey).where(sql`${table.endedAt} is null`),
    index("conferences_account_room_key_idx").on(table.accountId, table.roomKey, table.startsAt),
  ],
);
