import { sql } from "drizzle-orm";
import { bigint, boolean, pgTable, serial, text, timestamp, unique, uniqueIndex } from "drizzle-orm/pg-core";
import { accountIdColumn } from "../accounts/schema";

/**
 * A conference address (`room@conference.domain`) and the numeric id phone callers type.
 * Ids are unique across the deployment (the SIP gateway resolves them without knowing the
 * account); an address is unique within its account.
 */
export const conferenceMappings = pgTable(
  "conference_mappings",
  {
    /** 6–10 digits, the last one a Damm check digit; up to 10 digits needs bigint. */
    id: bigint("id", { mode: "number" }).primaryKey(),
    accountId: accountIdColumn(),
    /** Lowercased, as XMPP compares room addresses. */
    conference: text("conference").notNull(),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [unique("conference_mappings_account_conference_key").on(table.accountId, table.conference)],
);

/** The dial-in numbers an account publishes to its callers. */
export const phoneNumbers = pgTable(
  "phone_numbers",
  {
    id: serial("id").primaryKey(),
    accountId: accountIdColumn(),
    /** ISO 3166-1 alpha-2, upper case: jitsi-meet picks the flag and country name from it. */
    countryCode: text("country_code").notNull(),
    formattedNumber: text("formatted_number").notNull(),
    tollFree: boolean("toll_free").notNull().default(false),
    /** The number jitsi-meet shows first, as the one to call; at most one per account (below). */
    isDefault: boolean("is_default").notNull().default(false),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
  },
  // Leads with account_id, so it also serves the per-account listing.
  (table) => [
    unique("phone_numbers_account_number_key").on(table.accountId, table.formattedNumber),
    uniqueIndex("phone_numbers_one_default_idx").on(table.accountId).where(sql`${table.isDefault}`),
  ],
);
