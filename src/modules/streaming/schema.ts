import { sql } from "drizzle-orm";
import { index, integer, jsonb, pgTable, text, timestamp, uniqueIndex } from "drizzle-orm/pg-core";
import { accountIdColumn } from "../accounts/schema";

export const STREAM_STATES = ["starting", "running", "stopping", "stopped", "failed"] as const;
export type StreamState = (typeof STREAM_STATES)[number];

/** The spec's reconnect_window unit: 6000 is one minute, so one unit is 10 ms. */
export const RECONNECT_WINDOW_UNIT_MS = 10;

/** What the recorder was asked to do; stream keys are never part of it. */
export interface StreamOptions {
  codec: "H264" | "H265";
  isLowLatency: boolean;
  isRecording: boolean;
  multiBitrate: boolean;
  isVod: boolean;
  username: boolean;
  audioOnly: boolean;
  layout: "desktop" | "mobile";
  profile: "adaptive" | "HD";
  /** In the spec's unit: 6000 = one minute, so one unit is 10 ms. */
  reconnectWindow: number;
  /** Platform names of stream_keys, for the record; the keys themselves are not stored. */
  platforms: string[];
  destinationCount: number;
}

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
      .where(sql`${table.state} in ('starting', 'running', 'stopping')`),
    index("streams_pod_idx").on(table.podName, table.state),
  ],
);
