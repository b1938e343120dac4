import type { StoredPrivateKey } from "./sealing";
import { index, jsonb, pgTable, serial, text, timestamp } from "drizzle-orm/pg-core";

export const accounts = pgTable("accounts", {
  id: text("id").primaryKey(),
  name: text("name").notNull(),
  /** Algorithm used when this account's signing key is next made or rotated. */
  signingAlgorithm: text("signing_algorithm").notNull(),
  /**
   * The `sub` of the account's media tokens: the Jitsi domain (meet.example.com) or tenant
   * its Prosody checks with enable_domain_verification; `*` lets the tokens into any.
   */
  jitsiDomain: text("jitsi_domain").notNull().default("*"),
  createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
});

/** The owning account: every table of account data has it, and rows go with their account. */
export const accountIdColumn = () =>
  text("account_id")
    .notNull()
    .references(() => accounts.id, { onDelete: "cascade" });

export const apiKeys = pgTable(
  "api_keys",
  {
    id: serial("id").primaryKey(),
    accountId: accountIdColumn(),
    /** The first characters of the key, shown in listings so an operator can tell keys apart. */
    prefix: text("prefix").notNull(),
    /** SHA-256 of the whole key, hex; the key itself is never stored. */
    hash: text("hash").notNull().unique(),
    label: text("label").notNull().default(""),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
    revokedAt: timestamp("revoked_at", { withTimezone: true }),
  },
  (table) => [index("api_keys_account_idx").on(table.accountId)],
);

export const signingKeys = pgTable(
  "signing_keys",
  {
    kid: text("kid").primaryKey(),
    accountId: accountIdColumn(),
    algorithm: text("algorithm").notNull(),
    /** A sealed JWK (see sealing.ts); a plain one an older Parley stored is sealed at the next start. */
    privateJwk: jsonb("private_jwk").$type<StoredPrivateKey>().notNull(),
    publicJwk: jsonb("public_jwk").$type<JsonWebKey>().notNull(),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
    /** Set on rotation: the key stops signing but keeps verifying until verifyUntil. */
    retiredAt: timestamp("retired_at", { withTimezone: true }),
    verifyUntil: timestamp("verify_until", { withTimezone: true }),
  },
  (table) => [index("signing_keys_account_idx").on(table.accountId)],
);
