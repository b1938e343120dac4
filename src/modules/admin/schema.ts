import { bigserial, integer, jsonb, pgTable, serial, text, timestamp } from "drizzle-orm/pg-core";

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
