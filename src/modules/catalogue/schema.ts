/** The catalogue's tables: its events and each account's sequence. Webhook deliveries reference these events. */
import { bigint, index, jsonb, pgTable, text, timestamp, uniqueIndex } from "drizzle-orm/pg-core";
import { accountIdColumn } from "../accounts/schema";

/**
 * The last event sequence number of each account. Taking the next number updates this row,
 * so the row lock orders the account's writers: a later number always commits later, and a
 * reader that has seen sequence n never finds a smaller one appear afterwards.
 */
export const eventSequences = pgTable("event_sequences", {
  accountId: accountIdColumn().primaryKey(),
  lastSequence: bigint("last_sequence", { mode: "number" }).notNull(),
});

/** The public event catalogue's log (the transactional outbox): written with the change it describes. */
export const events = pgTable(
  "events",
  {
    id: text("id").primaryKey(),
    accountId: accountIdColumn(),
    sequence: bigint("sequence", { mode: "number" }).notNull(),
    type: text("type").notNull(),
    data: jsonb("data").$type<Record<string, unknown>>().notNull(),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [
    uniqueIndex("events_account_sequence_idx").on(table.accountId, table.sequence),
    index("events_created_idx").on(table.createdAt),
  ],
);
