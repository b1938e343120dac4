import {
  bigint,
  bigserial,
  boolean,
  doublePrecision,
  index,
  integer,
  jsonb,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
} from "drizzle-orm/pg-core";
import { sql } from "drizzle-orm";
import { accountIdColumn } from "../accounts/schema";
import type { StoredPrivateKey } from "../accounts";
import { events } from "../catalogue/schema";

export const webhookEndpoints = pgTable(
  "webhook_endpoints",
  {
    id: text("id").primaryKey(),
    accountId: accountIdColumn(),
    url: text("url").notNull(),
    description: text("description").notNull().default(""),
    /** Event types sent to the endpoint; null means every type. */
    eventTypes: jsonb("event_types").$type<string[] | null>(),
    enabled: boolean("enabled").notNull().default(true),
    /** Deliver one at a time in sequence order: a failing event holds back the later ones. */
    ordered: boolean("ordered").notNull().default(false),
    /** The `whsec_` secret, sealed like signing keys (see accounts/sealing.ts). */
    secret: jsonb("secret").$type<StoredPrivateKey>().notNull(),
    /** The secret before the last rotation, still signing beside the new one until previousSecretUntil. */
    previousSecret: jsonb("previous_secret").$type<StoredPrivateKey>(),
    previousSecretUntil: timestamp("previous_secret_until", { withTimezone: true }),
    /** Why Parley disabled the endpoint (410 Gone, failing too long); null when enabled or disabled by the account. */
    disabledReason: text("disabled_reason"),
    /** Start of the current run of failed attempts; cleared by any success. */
    failingSince: timestamp("failing_since", { withTimezone: true }),
    /**
     * The circuit breaker, open while set: no claim takes the endpoint's deliveries. Once past, a sweep takes one
     * as the probe, moving this a lease on; the probe's success clears it, its failure sets a cool-down again.
     */
    circuitOpenUntil: timestamp("circuit_open_until", { withTimezone: true }),
    /** The breaker's window, from a failed attempt: the attempts and the failures since, for their ratio. */
    windowStartedAt: timestamp("window_started_at", { withTimezone: true }),
    windowAttempts: integer("window_attempts").notNull().default(0),
    windowFailures: integer("window_failures").notNull().default(0),
    /** Deliveries a second at most, across every worker; null for no limit (see limits.ts). */
    ratePerSecond: doublePrecision("rate_per_second"),
    /** How many may go at once after a quiet spell; null is the rate rounded up. */
    rateBurst: integer("rate_burst"),
    /** Attempts in flight at most, across every worker (1 is serial); null for no limit. */
    maxInFlight: integer("max_in_flight"),
    /** The rate's token bucket: its tokens when last refilled, at rateRefilledAt. */
    rateTokens: doublePrecision("rate_tokens"),
    rateRefilledAt: timestamp("rate_refilled_at", { withTimezone: true }),
    /** When a claim last held back a due delivery of it for its limits: its health says throttled for a while. */
    throttledAt: timestamp("throttled_at", { withTimezone: true }),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp("updated_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [index("webhook_endpoints_account_idx").on(table.accountId)],
);

/**
 * The places of an endpoint with max_in_flight, one row each: a claim leases one for each delivery it takes, the
 * attempt's end frees it, and a worker that dies leaves it to expire, so the limit holds across workers and nodes.
 */
export const webhookSlots = pgTable(
  "webhook_slots",
  {
    endpointId: text("endpoint_id")
      .notNull()
      .references(() => webhookEndpoints.id, { onDelete: "cascade" }),
    slot: integer("slot").notNull(),
    heldUntil: timestamp("held_until", { withTimezone: true }).notNull().default(sql`'epoch'`),
  },
  (table) => [primaryKey({ columns: [table.endpointId, table.slot] })],
);

/**
 * One event to one endpoint: the delivery log the API and the console show. What is left to
 * deliver is webhook_due; an attempt's outcome changes no indexed column here, so with the
 * room fillfactor 70 leaves on each page (migration 0017) it is a HOT update.
 */
export const webhookDeliveries = pgTable(
  "webhook_deliveries",
  {
    id: bigserial("id", { mode: "number" }).primaryKey(),
    accountId: accountIdColumn(),
    endpointId: text("endpoint_id")
      .notNull()
      .references(() => webhookEndpoints.id, { onDelete: "cascade" }),
    eventId: text("event_id")
      .notNull()
      .references(() => events.id, { onDelete: "cascade" }),
    sequence: bigint("sequence", { mode: "number" }).notNull(),
    /** pending, succeeded, or failed (every retry used up). */
    status: text("status").notNull().default("pending"),
    attempts: integer("attempts").notNull().default(0),
    nextAttemptAt: timestamp("next_attempt_at", { withTimezone: true }).notNull().defaultNow(),
    /** Set while a worker sends it; a worker that died leaves it to expire. */
    leasedUntil: timestamp("leased_until", { withTimezone: true }),
    lastAttemptAt: timestamp("last_attempt_at", { withTimezone: true }),
    lastStatusCode: integer("last_status_code"),
    lastLatencyMs: integer("last_latency_ms"),
    /** The first kilobyte of the last answer, or why there was none. */
    lastResponse: text("last_response"),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [
    uniqueIndex("webhook_deliveries_endpoint_event_idx").on(table.endpointId, table.eventId),
    index("webhook_deliveries_endpoint_sequence_idx").on(table.endpointId, table.sequence),
  ],
);

/**
 * The deliveries left to send, one row each while its log row is pending: the truth workers
 * claim from (Redis only rings the doorbell). Narrow, so a claim reads little: on PostgreSQL
 * a batch's transaction deletes the rows it sends and re-inserts a failure with its next
 * attempt, on the embedded database a claim moves `due_at` past its lease. No foreign key:
 * deleting an endpoint or purging an event must not wait for the rows a batch holds (that
 * batch then writes their log rows, a deadlock); a claim drops a row whose delivery is gone.
 */
export const webhookDue = pgTable(
  "webhook_due",
  {
    deliveryId: bigint("delivery_id", { mode: "number" }).primaryKey(),
    endpointId: text("endpoint_id").notNull(),
    sequence: bigint("sequence", { mode: "number" }).notNull(),
    dueAt: timestamp("due_at", { withTimezone: true }).notNull().defaultNow(),
  },
  (table) => [
    index("webhook_due_due_at_idx").on(table.dueAt),
    // An ordered endpoint's delivery waits while an earlier one of it is due.
    index("webhook_due_endpoint_sequence_idx").on(table.endpointId, table.sequence),
  ],
);

/**
 * Due deliveries no claim may take yet, set aside: a disabled endpoint's, until it is enabled
 * again, and an ordered endpoint's behind its head (its earliest, the one it keeps in the due
 * set), each brought forward when the one before it is done (promoteHeads). In the due set
 * every claim would scan past them: a backlog of 100,000 left by an endpoint disabled after a
 * day of failures made PostgreSQL's share of every other delivery five to seven times as costly.
 * No batch holds these rows, so unlike the due set's they may follow their delivery's deletion.
 */
export const webhookParked = pgTable(
  "webhook_parked",
  {
    deliveryId: bigint("delivery_id", { mode: "number" })
      .primaryKey()
      .references(() => webhookDeliveries.id, { onDelete: "cascade" }),
    endpointId: text("endpoint_id").notNull(),
    sequence: bigint("sequence", { mode: "number" }).notNull(),
  },
  // An ordered endpoint's next delivery is the first of its rows here.
  (table) => [index("webhook_parked_endpoint_sequence_idx").on(table.endpointId, table.sequence)],
);
