import { sql } from "drizzle-orm";
import { bigint, index, integer, pgTable, text, timestamp, uuid } from "drizzle-orm/pg-core";
import { accounts } from "../src/modules/accounts/schema";

/** One row per incoming INVITE dialog that the gateway took on, answered or not. */
export const sipCalls = pgTable(
  "sip_calls",
  {
    id: uuid("id").primaryKey().defaultRandom(),
    /** Unknown until the room is resolved; a refused call may never have one. */
    accountId: text("account_id").references(() => accounts.id, { onDelete: "cascade" }),
    callId: text("call_id").notNull(),
    caller: text("caller").notNull(),
    callee: text("callee").notNull(),
    transport: text("transport").notNull(),
    source: text("source").notNull(),
    /** Bare lower-case room name once resolved. */
    room: text("room"),
    /** How the room was found: header, uri, default or dtmf. */
    resolvedBy: text("resolved_by"),
    mapperId: bigint("mapper_id", { mode: "number" }),
    startedAt: timestamp("started_at", { withTimezone: true }).notNull().defaultNow(),
    answeredAt: timestamp("answered_at", { withTimezone: true }),
    joinedAt: timestamp("joined_at", { withTimezone: true }),
    endedAt: timestamp("ended_at", { withTimezone: true }),
    /** SIP status of the final answer to the INVITE (200 for an answered call). */
    finalStatus: integer("final_status"),
    /**
     * Why the call ended: caller_bye, gateway_bye, cancelled, not_found, no_ack, dtmf_failed,
     * gateway_lost, record_lost, ...
     */
    reason: text("reason"),
    /** The gateway process that took the call: its calls are ended by another if it dies mid-call. */
    gateway: text("gateway"),
    /** The media endpoint (SIP_MEDIA_URI) the call was bridged to, or the last one tried. */
    mediaEndpoint: text("media_endpoint"),
    /** The Call-ID of the gateway's leg to the media endpoint. */
    mediaCallId: text("media_call_id"),
    /** The media endpoint's final answer to that leg (200 once bridged). */
    mediaStatus: integer("media_status"),
    /** RTP packets relayed from the caller to the endpoint and back. */
    packetsFromCaller: bigint("packets_from_caller", { mode: "number" }),
    packetsToCaller: bigint("packets_to_caller", { mode: "number" }),
  },
  (table) => [
    index("sip_calls_call_id_idx").on(table.callId, table.startedAt),
    index("sip_calls_account_idx").on(table.accountId, table.startedAt),
    index("sip_calls_open_idx").on(table.gateway).where(sql`${table.endedAt} is null`),
  ],
);

export type CallRecord = typeof sipCalls.$inferSelect;
