import { bigserial, integer, jsonb, pgTable, text, timestamp } from "drizzle-orm/pg-core";

/**
 * Every change made through the admin API: who, what, to what, when and from where. It holds
 * no secret: created keys, tokens and webhook secrets are named by their id or prefix only.
 * Paged newest first by id.
 */
export const auditEntries = pgTable("audit_entries", {
  id: bigserial("id", { mode: "number" }).primaryKey(),
  at: timestamp("at", { withTimezone: true }).notNull().defaultNow(),
  /** The operator token's name, or local:<uid>. */
  actor: text("actor").notNull(),
  /** token (an operator token) or local (the Unix socket). */
  actorKind: text("actor_kind").notNull(),
  /** Set when the actor is an operator token: which one, even after it is revoked. */
  tokenId: integer("token_id"),
  /** The command's name, as the command line spells it: create-account, set-limit, … */
  action: text("action").notNull(),
  /** What the change was made to: an account, key, number, webhook or token id; null when it spans every account. */
  target: text("target"),
  /** The caller's IP address, or unix:<socket path>. */
  address: text("address").notNull(),
  detail: jsonb("detail").notNull().default({}),
});
