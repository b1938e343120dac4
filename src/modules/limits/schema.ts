import { bigint, pgTable, primaryKey, text, timestamp } from "drizzle-orm/pg-core";
import { accountIdColumn } from "../accounts/schema";

/** An account's own value for a limit; limits without a row take the default in definitions.ts. */
export const accountLimits = pgTable(
  "account_limits",
  {
    accountId: accountIdColumn(),
    /** A name from definitions.ts, such as `tokens.per_key`. */
    name: text("name").notNull(),
    value: bigint("value", { mode: "number" }).notNull(),
    updatedAt: timestamp("updated_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [primaryKey({ columns: [table.accountId, table.name] })],
);

/**
 * What an account stores that a quota counts. Kept by database triggers (migration
 * 0009_chat_bytes), so every insert, edit and delete, cascades included, moves it.
 */
export const quotaUsage = pgTable("quota_usage", {
  accountId: accountIdColumn().primaryKey(),
  chatBytes: bigint("chat_bytes", { mode: "number" }).notNull().default(0),
});
