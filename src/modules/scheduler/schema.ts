import { sql } from "drizzle-orm";
import { doublePrecision, index, integer, pgTable, serial, text, timestamp, uniqueIndex } from "drizzle-orm/pg-core";
import { accountIdColumn } from "../accounts/schema";

/** A room booked ahead of time (spec 2.3). Times are kept as given and as the instants they mean. */
export const reservations = pgTable(
  "reservations",
  {
    id: serial("id").primaryKey(),
    accountId: accountIdColumn(),
    /** Lowercased, spaces as `_`: the form Jitsi uses for the room. */
    name: text("name").notNull(),
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
  (table) => [index("reservations_account_name_idx").on(table.accountId, table.name, table.startsAt)],
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
    name: text("name").notNull(),
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
    uniqueIndex("conferences_open_name_key").on(table.accountId, table.name).where(sql`${table.endedAt} is null`),
    index("conferences_account_name_idx").on(table.accountId, table.name, table.startsAt),
  ],
);
