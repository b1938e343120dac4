import { pgTable, serial, text, timestamp } from "drizzle-orm/pg-core";

/**
 * Credentials for scripts that run the deployment through /api/v1/admin. Like API keys they
 * are shown once and kept only as a SHA-256 hash; `read` tokens may only look.
 */
export const operatorTokens = pgTable("operator_tokens", {
  id: serial("id").primaryKey(),
  name: text("name").notNull(),
  /** "read" (GET only) or "full". */
  scope: text("scope").notNull(),
  /** The first characters of the token, so a listing can tell tokens apart. */
  prefix: text("prefix").notNull(),
  hash: text("hash").notNull().unique(),
  /** Who made it: an operator, another token, or the local operator on the socket. */
  createdBy: text("created_by").notNull(),
  createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
  lastUsedAt: timestamp("last_used_at", { withTimezone: true }),
  revokedAt: timestamp("revoked_at", { withTimezone: true }),
});
