/**
 * The conference event log. Every feature that learns a usage fact (a participant joined,
 * a stream started, a phone call ended) appends it here; the cdr worker folds the log into
 * the usage report. Appending is idempotent by dedupeKey, and each new event is also
 * published on Redis so live consumers (the recorder's reconnect window) can react.
 */
import { db } from "../../db/client";
import { redis, redisKey } from "../../queue/connection";
import { conferenceEvents } from "./schema";

export const EVENT_KINDS = [
  "room_created",
  "room_destroyed",
  "occupant_joined",
  "occupant_left",
  "stream_started",
  "stream_stopped",
  "recording_started",
  "recording_stopped",
  "call_started",
  "call_ended",
  "viewers_changed",
] as const;
export type EventKind = (typeof EVENT_KINDS)[number];

export interface ConferenceEvent {
  accountId: string;
  kind: EventKind;
  room: string;
  occurredAt: Date;
  subject?: string;
  payload?: Record<string, unknown>;
  dedupeKey: string;
}

export const eventChannel = () => redisKey("events");

/** Stores the event unless the same delivery was stored before; true when it is new. */
export async function appendEvent(event: ConferenceEvent): Promise<boolean> {
  const inserted = await db
    .insert(conferenceEvents)
    .values({ ...event, payload: event.payload ?? {} })
    .onConflictDoNothing({ target: [conferenceEvents.accountId, conferenceEvents.dedupeKey] })
    .returning({ id: conferenceEvents.id });
  if (inserted.length === 0) return false;
  await redis().publish(eventChannel(), JSON.stringify({ ...event, id: inserted[0]!.id }));
  return true;
}
