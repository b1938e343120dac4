import { sql } from "drizzle-orm";
import { index, integer, jsonb, pgTable, text, timestamp, uniqueIndex } from "drizzle-orm/pg-core";
import { accountIdColumn } from "../accounts/schema";
import type { SealedKey } from "../accounts";
import type { StreamOptions } from "./options";

export const STREAM_STATES = ["queued", "starting", "running", "stopping", "stopped", "failed"] as const;
export type StreamState = (typeof STREAM_STATES)[number];

/**
 * The highest `priority` a start may ask for. Declared here rather than with the wire types: the recorder
 * worker walks the priorities, and the wire types would bring the HTTP framework into its process.
 */
export const MAX_PRIORITY = 9;

/** One live stream of a room, from the start request until it stopped or failed. */
export const streams = pgTable(
  "streams",
  {
    id: text("id").primaryKey(),
    accountId: accountIdColumn(),
    /** The bare lowercase room name. */
    room: text("room").notNull(),
    streamName: text("stream_name").notNull(),
    state: text("state").$type<StreamState>().notNull(),
    /** Why it stopped or failed: requested, room_empty, timeout, recorder_exited: ..., recorder_lost. */
    reason: text("reason"),
    options: jsonb("options").$type<StreamOptions>().notNull(),
    /** What it costs a recorder worker (cost.ts), kept so an account's units are summed in SQL. */
    units: integer("units").notNull().default(0),
    /** The start's priority, 0 to 9: a higher one is taken from the queue first. */
    priority: integer("priority").notNull().default(0),
    /**
     * Its account's turn in the queue at its priority, set when it is queued (queue.ts): one
     * after the account's last queued stream, or the queue's front turn when it has none.
     */
    queueTurn: integer("queue_turn"),
    /**
     * While queued, the start's RTMP destinations (stream keys), sealed (accounts/sealing.ts), so
     * a start job lost with Redis can be made again; cleared once a worker takes the stream.
     */
    queuedDestinations: jsonb("queued_destinations").$type<SealedKey>(),
    /** The recorder worker that runs it, and where its process group lives (for orphan clean-up). */
    podName: text("pod_name"),
    host: text("host"),
    pid: integer("pid"),
    /** Object key of the uploaded MP4, once there is one. */
    recordingKey: text("recording_key"),
    createdAt: timestamp("created_at", { withTimezone: true }).notNull().defaultNow(),
    startedAt: timestamp("started_at", { withTimezone: true }),
    stoppedAt: timestamp("stopped_at", { withTimezone: true }),
  },
  (table) => [
    uniqueIndex("streams_name_idx").on(table.streamName),
    // At most one live stream per room: concurrent starts on different API processes meet here.
    uniqueIndex("streams_live_room_idx")
      .on(table.accountId, table.room)
      .where(sql`${table.state} in ('queued', 'starting', 'running', 'stopping')`),
    index("streams_queued_idx").on(table.createdAt).where(sql`${table.state} = 'queued'`),
    index("streams_pod_idx").on(table.podName, table.state),
  ],
);
