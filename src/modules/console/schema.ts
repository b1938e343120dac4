import { index, integer, pgTable, text, timestamp } from "drizzle-orm/pg-core";
import { accounts } from "../accounts/schema";
import { operators } from "../operators/schema";

/**
 * One sign-in to the console, by an operator or an account owner. The cookie's JWT names it;
 * logging out sets revokedAt, so a copied cookie stops working on every API process at once.
 */
export const consoleSessions = pgTable(
  "console_sessions",
  {
    id: text("id").primaryKey(),
    operatorId: integer("operator_id").references(() => operators.id, { onDelete: "cascade" }),
    /** Set for an account owner's session: the one account it may see. */
    accountId: text("account_id").references(() => accounts.id, { onDelete: "cascade" }),
    /** SHA-256 of the API key an owner signed in with: revoking the key ends the session too. */
    apiKeyHash: text("api_key_hash"),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
    /** However often the token is renewed, the session ends here. */
    expiresAt: timestamp("expires_at", { withTimezone: true }).notNull(),
    revokedAt: timestamp("revoked_at", { withTimezone: true }),
  },
  (table) => [index("console_sessions_expires_idx").on(table.expiresAt)],
);
