/**
 * The conference event log. Every feature that learns a usage fact (a participant joined,
 * a stream started, a phone call ended) appends it here; the cdr worker folds the log into
 * the usage report. Appending is idempotent by dedupeKey. The database is the truth about
 * what is left to fold (conference_events_unfolded, written with the event by a trigger and
 * cleared by the fold's transaction); the fold job queued in Redis is only a doorbell that
 * gets it folded at once, and the cdr sweep folds whatever a lost doorbell left behind. So an
 * event is acknowledged once it is stored, whatever Redis does.
 */
import { and, eq, inArray } from "drizzle-orm";
import { config } from "../../config";
import { type Database, db } from "../../db/client";
import { log } from "../../core/log";
import { redis, withinRedis } from "../../queue/connection";
import { pubsub } from "../../queue/redis-pubsub";
import { CDR_FOLD_JOB, type CdrFoldJob, getQueue, QUEUE_NAMES } from "../../queue/queues";
import { conferenceEvents, conferenceEventsUnfolded, type EventKind, type StoredEvent } from "./schema";
import { type ConferenceFacts, eventSyncFacts, isEventSyncKind } from "./event-sync";

export interface ConferenceEvent {
  accountId: string;
  kind: EventKind;
  room: string;
  occurredAt: Date;
  subject?: string;
  payload?: Record<string, unknown>;
  dedupeKey: string;
  /** The payload's facts when the caller has read them already; else they are read here. */
  facts?: ConferenceFacts;
}


/** Where every newly stored event is published (core/pubsub), for the recorder's room occupancy. */
export const EVENT_CHANNEL = "events";

/**
 * Runs a Redis step of an append, skipped at once when Redis is not connected (ioredis would
 * hold the command until Redis is back) and given up after PROMPT_REDIS_MS. Either way the
 * event is still acknowledged: it is stored, and the sweep folds it.
 */
async function ifRedisAnswers(what: string, eventIds: number[], step: () => Promise<unknown>): Promise<void> {
  try {
    await withinRedis(redis(), what, step);
  } catch (error) {
    log.warn({ eventIds, err: (error as Error).message }, `${what} skipped: the usage sweep folds the events`);
  }
}

/**
 * A room's fold jobs are gathered for up to this long, so a burst of its events is folded by
 * one job: every append in the same period replaces the room's waiting job, and the job that
 * runs at the period's end folds all of the room's events not folded yet.
 */
const FOLD_GATHER_MS = 250;

/**
 * Rings the fold's doorbell for the room of a stored event. One job per room is pending at a
 * time (deduplicated by room): while it is delayed, a newer event's job replaces it (so the
 * job is named by the room's latest event); once it is waiting, the new event is simply
 * folded by it; while it runs, the newest job is kept and queued when it ends, so an event
 * stored after the fold read the room is folded by the next job.
 */
export async function enqueueFold(eventId: number, where: { accountId: string; room: string }): Promise<void> {
  const job: CdrFoldJob = { eventId };
  await getQueue(QUEUE_NAMES.cdr).add(CDR_FOLD_JOB, job, {
    jobId: `event-${eventId}`,
    // Aligned to the period, so replacing a job never pushes its room's fold further out.
    delay: FOLD_GATHER_MS - (Date.now() % FOLD_GATHER_MS),
    deduplication: { id: `room:${where.accountId}|${where.room}`, replace: true, keepLastIfActive: true },
    attempts: config.usage.jobAttempts,
    backoff: { type: "exponential", delay: 1000 },
    removeOnComplete: { count: config.usage.keepCompletedJobs },
    removeOnFail: { count: config.usage.keepCompletedJobs * 10 },
  });
}

/** What storeEvents stored: which events are new, and what to announce once they are committed. */
export interface StoredBatch {
  /** Per event, in the order given: true when it is new. */
  isNew: boolean[];
  /** The new events with their ids, to publish. */
  added: Array<ConferenceEvent & { id: number }>;
  /** Per room with a new event or a repeated one still unfolded, the newest such event, for its fold doorbell. */
  rooms: Map<string, { eventId: number; accountId: string; room: string }>;
}

const roomOf = (event: { accountId: string; room: string }) => `${event.accountId}|${event.room}`;
/** A delivery's identity: its account and dedupe key. */
const deliveryOf = (event: { accountId: string; dedupeKey: string }) => `${event.accountId}\n${event.dedupeKey}`;

/**
 * Stores events in one statement through `executor` (a transaction of the caller's, or the
 * global handle), each unless the same delivery was stored before (by its account and
 * dedupeKey, also within the batch). Nothing is announced: once the rows are committed,
 * announceStored publishes the new ones and rings the fold's doorbell, once per room.
 */
export async function storeEvents(executor: Database, events: ConferenceEvent[]): Promise<StoredBatch> {
  const batch: StoredBatch = { isNew: [], added: [], rooms: new Map() };
  if (events.length === 0) return batch;
  const inserted = await executor
    .insert(conferenceEvents)
    .values(
      events.map(({ facts, ...event }) => {
        const payload = event.payload ?? {};
        // A conference event's facts are read from its payload once, by its ingestion or here, whoever appends it.
        return { ...event, payload, ...(facts ?? (isEventSyncKind(event.kind) ? eventSyncFacts(event.kind, payload) : {})) };
      }),
    )
    .onConflictDoNothing({ target: [conferenceEvents.accountId, conferenceEvents.dedupeKey] })
    .returning({ id: conferenceEvents.id, accountId: conferenceEvents.accountId, dedupeKey: conferenceEvents.dedupeKey });
  const ids = new Map(inserted.map((row) => [deliveryOf(row), row.id]));
  const repeated: ConferenceEvent[] = [];
  // The facts stay out of what is published: the log's readers take them from its columns.
  for (const { facts, ...event } of events) {
    const key = deliveryOf(event);
    const id = ids.get(key);
    // A key given twice in the batch was stored once, for its first event.
    ids.delete(key);
    batch.isNew.push(id !== undefined);
    if (id === undefined) {
      repeated.push(event);
      continue;
    }
    batch.added.push({ ...event, id });
    batch.rooms.set(roomOf(event), { eventId: id, accountId: event.accountId, room: event.room });
  }
  // A repeat of a delivery whose event is still unfolded rings the doorbell again.
  for (const stored of await unfoldedRepeats(executor, repeated)) {
    const room = batch.rooms.get(roomOf(stored));
    if (!room || room.eventId < stored.id) batch.rooms.set(roomOf(stored), { eventId: stored.id, accountId: stored.accountId, room: stored.room });
  }
  return batch;
}

/** The stored, still unfolded events that the given deliveries repeat. */
async function unfoldedRepeats(executor: Database, events: ConferenceEvent[]): Promise<Array<{ id: number; accountId: string; room: string }>> {
  if (events.length === 0) return [];
  // Plain lists the (account, dedupe key) index serves; a pair of one event's account and another's key is dropped after.
  const rows = await executor
    .select({ id: conferenceEvents.id, accountId: conferenceEvents.accountId, room: conferenceEvents.room, dedupeKey: conferenceEvents.dedupeKey })
    .from(conferenceEvents)
    .innerJoin(conferenceEventsUnfolded, eq(conferenceEventsUnfolded.eventId, conferenceEvents.id))
    .where(
      and(
        inArray(conferenceEvents.accountId, [...new Set(events.map((event) => event.accountId))]),
        inArray(conferenceEvents.dedupeKey, [...new Set(events.map((event) => event.dedupeKey))]),
      ),
    );
  const wanted = new Set(events.map(deliveryOf));
  return rows.filter((row) => wanted.has(deliveryOf(row)));
}

/**
 * Once a batch is committed (it is acknowledged then): publishes each new event and rings the
 * fold's doorbell once per room, naming the room's newest event (the job folds all of the
 * room's unfolded events). Best effort: an unfolded row is found by the sweep.
 */
export async function announceStored(batch: StoredBatch): Promise<void> {
  if (batch.added.length > 0) {
    await ifRedisAnswers(
      "publishing the events",
      batch.added.map((event) => event.id),
      () => Promise.all(batch.added.map((event) => pubsub().publish(EVENT_CHANNEL, JSON.stringify(event)))),
    );
  }
  if (batch.rooms.size > 0) {
    const rooms = [...batch.rooms.values()];
    await ifRedisAnswers(
      "queueing the fold",
      rooms.map((room) => room.eventId),
      () => Promise.all(rooms.map((room) => enqueueFold(room.eventId, room))),
    );
  }
}

/**
 * Stores the event unless the same delivery was stored before; true when it is new. Once the
 * row is stored the event is acknowledged: publishing it and ringing the fold's doorbell are
 * best effort, since an unfolded row is found by the sweep. A repeat of a delivery whose
 * event is still unfolded rings the doorbell again. `publish` writes the public catalogue event
 * that a new row means, in the row's own transaction.
 */
export async function appendEvent(event: ConferenceEvent, publish?: (tx: Database) => Promise<void>): Promise<boolean> {
  // A new event's catalogue event commits with it; a repeated delivery publishes nothing.
  const batch = publish
    ? await db.transaction(async (tx) => {
        const stored = await storeEvents(tx, [event]);
        if (stored.isNew[0]) await publish(tx);
        return stored;
      })
    : await storeEvents(db, [event]);
  await announceStored(batch);
  return batch.isNew[0]!;
}

/** Stored events by id, as stored. */
export async function eventsByIds(ids: number[]): Promise<StoredEvent[]> {
  if (ids.length === 0) return [];
  const rows = await db.select({ id: conferenceEvents.id, accountId: conferenceEvents.accountId, kind: conferenceEvents.kind, room: conferenceEvents.room, occurredAt: conferenceEvents.occurredAt, subject: conferenceEvents.subject, payload: conferenceEvents.payload }).from(conferenceEvents).where(inArray(conferenceEvents.id, ids));
  return rows;
}
