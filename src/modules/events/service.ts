/**
 * The conference event log. Every feature that learns a usage fact (a participant joined,
 * a stream started, a phone call ended) appends it here; the cdr worker folds the log into
 * the usage report. Appending is idempotent by dedupeKey, each new event is published on
 * Redis so live consumers (the recorder's reconnect window) can react, and every append,
 * repeated or not, queues a fold job for the stored row.
 */
import { and, asc, eq, gt, inArray, sql } from "drizzle-orm";
import { config } from "../../config";
import { db } from "../../db/client";
import { AppError } from "../../http/errors";
import { redis, redisKey } from "../../queue/connection";
import { CDR_FOLD_JOB, type CdrFoldJob, getQueue, QUEUE_NAMES } from "../../queue/queues";
import { conferenceEvents } from "./schema";

/** Kinds that describe one stream or call, named by subject, rather than a conference room. */
const MEDIA_KINDS = [
  "stream_started",
  "stream_stopped",
  "recording_started",
  "recording_stopped",
  "call_started",
  "call_ended",
  "viewers_changed",
] as const;

export const EVENT_KINDS = ["room_created", "room_destroyed", "occupant_joined", "occupant_left", ...MEDIA_KINDS] as const;
export type EventKind = (typeof EVENT_KINDS)[number];
export const MEDIA_EVENT_KINDS: readonly EventKind[] = MEDIA_KINDS;

export interface ConferenceEvent {
  accountId: string;
  kind: EventKind;
  room: string;
  occurredAt: Date;
  subject?: string;
  payload?: Record<string, unknown>;
  dedupeKey: string;
}

export interface StoredEvent {
  id: number;
  accountId: string;
  kind: EventKind;
  room: string;
  occurredAt: Date;
  subject: string | null;
  payload: Record<string, unknown>;
}

export const eventChannel = () => redisKey("events");

/** Fold jobs are named by event id, so a job queued twice for one event while it waits runs once. */
export async function enqueueFold(eventId: number): Promise<void> {
  const job: CdrFoldJob = { eventId };
  try {
    await getQueue(QUEUE_NAMES.cdr).add(CDR_FOLD_JOB, job, {
      jobId: `event-${eventId}`,
      attempts: config.usage.jobAttempts,
      backoff: { type: "exponential", delay: 1000 },
      removeOnComplete: { count: config.usage.keepCompletedJobs },
      removeOnFail: { count: config.usage.keepCompletedJobs * 10 },
    });
  } catch (error) {
    // A 5xx makes event_sync retry; the retry finds the stored row and queues it again.
    throw new AppError("dependency_down", `the event is stored but could not be queued for folding (${(error as Error).message}); send it again`);
  }
}

/**
 * Stores the event unless the same delivery was stored before; true when it is new.
 * A repeat still queues a fold of the stored row: if the first delivery's enqueue was lost
 * (Redis down after the insert), the sender's retry is what gets the event folded.
 */
export async function appendEvent(event: ConferenceEvent): Promise<boolean> {
  const inserted = await db
    .insert(conferenceEvents)
    .values({ ...event, payload: event.payload ?? {} })
    .onConflictDoNothing({ target: [conferenceEvents.accountId, conferenceEvents.dedupeKey] })
    .returning({ id: conferenceEvents.id });
  if (inserted.length === 0) {
    const [stored] = await db
      .select({ id: conferenceEvents.id })
      .from(conferenceEvents)
      .where(and(eq(conferenceEvents.accountId, event.accountId), eq(conferenceEvents.dedupeKey, event.dedupeKey)));
    if (stored) await enqueueFold(stored.id);
    return false;
  }
  const id = inserted[0]!.id;
  await redis().publish(eventChannel(), JSON.stringify({ ...event, id }));
  await enqueueFold(id);
  return true;
}

const storedColumns = {
  id: conferenceEvents.id,
  accountId: conferenceEvents.accountId,
  kind: conferenceEvents.kind,
  room: conferenceEvents.room,
  occurredAt: conferenceEvents.occurredAt,
  subject: conferenceEvents.subject,
  payload: conferenceEvents.payload,
};

export async function eventsByIds(ids: number[]): Promise<StoredEvent[]> {
  if (ids.length === 0) return [];
  const rows = await db.select(storedColumns).from(conferenceEvents).where(inArray(conferenceEvents.id, ids));
  return rows as StoredEvent[];
}

/** A page of the log in id order, for refolding everything (after a fold change, or in the benchmark). */
export async function eventsAfter(afterId: number, limit: number): Promise<StoredEvent[]> {
  const rows = await db
    .select(storedColumns)
    .from(conferenceEvents)
    .where(gt(conferenceEvents.id, afterId))
    .orderBy(asc(conferenceEvents.id))
    .limit(limit);
  return rows as StoredEvent[];
}

/** Every stream and call event about the given subjects, oldest first. */
export async function mediaEventsForSubjects(subjects: Array<{ accountId: string; subject: string }>): Promise<StoredEvent[]> {
  if (subjects.length === 0) return [];
  // A join against a JSON list of pairs: drizzle has no tuple IN, and thousands of ORs would plan slowly.
  const wanted = sql`select s."accountId", s.subject from jsonb_to_recordset(${JSON.stringify(subjects)}::jsonb) as s("accountId" text, subject text)`;
  const rows = await db
    .select(storedColumns)
    .from(conferenceEvents)
    .where(and(sql`(${conferenceEvents.accountId}, ${conferenceEvents.subject}) in (${wanted})`, inArray(conferenceEvents.kind, [...MEDIA_EVENT_KINDS])))
    .orderBy(asc(conferenceEvents.occurredAt), asc(conferenceEvents.id));
  return rows as StoredEvent[];
}

/* ---------- Jitsi's event_sync Prosody module ---------- */

export const EVENT_SYNC_NAMES = {
  room_created: "muc-room-created",
  room_destroyed: "muc-room-destroyed",
  occupant_joined: "muc-occupant-joined",
  occupant_left: "muc-occupant-left",
} as const;
export type EventSyncKind = keyof typeof EVENT_SYNC_NAMES;

export interface EventSyncOccupant {
  occupant_jid: string;
  joined_at: number;
  left_at?: number;
  name?: string;
  email?: string;
  id?: string | number;
  [extra: string]: unknown;
}

/** One event_sync delivery body; the module may add room attributes and user context fields. */
export interface EventSyncBody {
  event_name: string;
  room_name: string;
  room_jid?: string;
  is_breakout?: boolean;
  breakout_room_id?: string;
  created_at?: number;
  destroyed_at?: number;
  active_occupants_count?: number;
  occupant?: EventSyncOccupant;
  all_occupants?: EventSyncOccupant[] | Record<string, EventSyncOccupant>;
  [extra: string]: unknown;
}

/** 2286-11-20 in unix seconds: a bigger number is a millisecond timestamp sent by mistake. */
const LATEST_UNIX_SECONDS = 9_999_999_999;

function unixSeconds(field: string, value: number | undefined): Date {
  if (value === undefined) throw new AppError("validation_failed", `${field}: required for this event`);
  if (!Number.isFinite(value) || value < 0 || value > LATEST_UNIX_SECONDS) {
    throw new AppError("validation_failed", `${field}: must be a unix time in seconds, got ${value}`);
  }
  return new Date(Math.floor(value) * 1000);
}

/** The breakout room's id, or "" for the main room. */
export function breakoutOf(body: Pick<EventSyncBody, "is_breakout" | "breakout_room_id">): string {
  return body.is_breakout ? (body.breakout_room_id ?? "") : "";
}

/**
 * Checks an event_sync delivery and appends it. The dedupe key is built from what names
 * the fact in the payload (room, breakout, occupant jid and the source's own timestamps),
 * so the module's retries of one delivery are stored once. Returns true when it is new.
 */
export async function recordEventSync(accountId: string, kind: EventSyncKind, body: EventSyncBody): Promise<boolean> {
  const expected = EVENT_SYNC_NAMES[kind];
  if (body.event_name !== expected) {
    throw new AppError("validation_failed", `event_name: this route takes "${expected}", got "${body.event_name}"`);
  }
  const room = body.room_name.trim().toLowerCase();
  if (room === "") throw new AppError("validation_failed", "room_name: must not be empty");
  if (body.is_breakout && !body.breakout_room_id) {
    throw new AppError("validation_failed", "breakout_room_id: required when is_breakout is true");
  }
  const breakout = breakoutOf(body);
  const where = `${room}|${breakout}`;
  let occurredAt: Date;
  let subject: string | undefined;
  let dedupeKey: string;
  switch (kind) {
    case "room_created": {
      occurredAt = unixSeconds("created_at", body.created_at);
      dedupeKey = `room_created|${where}|${occurredAt.getTime() / 1000}`;
      break;
    }
    case "room_destroyed": {
      const createdAt = unixSeconds("created_at", body.created_at);
      occurredAt = unixSeconds("destroyed_at", body.destroyed_at);
      if (occurredAt < createdAt) throw new AppError("validation_failed", "destroyed_at: must not be before created_at");
      const occupants = Array.isArray(body.all_occupants) ? body.all_occupants : Object.values(body.all_occupants ?? {});
      for (const [index, occupant] of occupants.entries()) checkOccupant(`all_occupants.${index}`, occupant, false);
      dedupeKey = `room_destroyed|${where}|${createdAt.getTime() / 1000}`;
      break;
    }
    case "occupant_joined":
    case "occupant_left": {
      if (!body.occupant) throw new AppError("validation_failed", "occupant: required for this event");
      const leaving = kind === "occupant_left";
      const { joinedAt, leftAt } = checkOccupant("occupant", body.occupant, leaving);
      occurredAt = leaving ? leftAt! : joinedAt;
      subject = body.occupant.occupant_jid;
      dedupeKey = `${kind}|${where}|${subject}|${joinedAt.getTime() / 1000}`;
      break;
    }
  }
  return appendEvent({ accountId, kind, room, occurredAt, subject, payload: body, dedupeKey });
}

function checkOccupant(field: string, occupant: EventSyncOccupant, leftRequired: boolean) {
  if (typeof occupant.occupant_jid !== "string" || occupant.occupant_jid === "") {
    throw new AppError("validation_failed", `${field}.occupant_jid: required`);
  }
  const joinedAt = unixSeconds(`${field}.joined_at`, occupant.joined_at);
  const leftAt = occupant.left_at === undefined && !leftRequired ? undefined : unixSeconds(`${field}.left_at`, occupant.left_at);
  if (leftAt && leftAt < joinedAt) throw new AppError("validation_failed", `${field}.left_at: must not be before joined_at`);
  return { joinedAt, leftAt };
}
