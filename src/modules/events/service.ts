/**
 * The conference event log. Every feature that learns a usage fact (a participant joined,
 * a stream started, a phone call ended) appends it here; the cdr worker folds the log into
 * the usage report. Appending is idempotent by dedupeKey. The database is the truth about
 * what is left to fold (conference_events_unfolded, written with the event by a trigger and
 * cleared by the fold's transaction): it is the work table of the outbox's "cdr" consumer,
 * rung per room once the event commits, and the cdr sweep folds whatever a lost ring left
 * behind. So an event is acknowledged once it is stored, whatever Redis does.
 */
import { and, eq, inArray } from "drizzle-orm";
import { type Database, db } from "../../db/client";
import { log } from "../../core/log";
import { redis, withinRedis } from "../../queue/connection";
import { pubsub } from "../../queue/pubsub";
import { outbox } from "../../queue/outbox";
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
 * event is still acknowledged: it is stored.
 */
async function ifRedisAnswers(what: string, eventIds: number[], step: () => Promise<unknown>): Promise<void> {
  try {
    await withinRedis(redis(), what, step);
  } catch (error) {
    log.warn({ eventIds, err: (error as Error).message }, `${what} skipped`);
  }
}

/** The outbox consumer (core/outbox) that folds stored events into usage: the cdr worker. Its keys are foldKey's. */
export const FOLD_CONSUMER = "cdr";

/** A room's key in the fold's rings: its account and its name. */
export const foldKey = (where: { accountId: string; room: string }) => `${where.accountId}|${where.room}`;

/** The room a fold ring's key names (account ids hold no `|`; room names may). */
export function roomOfFoldKey(key: string): { accountId: string; room: string } {
  const bar = key.indexOf("|");
  return { accountId: key.slice(0, bar), room: key.slice(bar + 1) };
}

/** What storeEvents stored: which events are new, and what to announce once they are committed. */
export interface StoredBatch {
  /** Per event, in the order given: true when it is new. */
  isNew: boolean[];
  /** The new events with their ids, to publish. */
  added: Array<ConferenceEvent & { id: number }>;
}
/** A delivery's identity: its account and dedupe key. */
const deliveryOf = (event: { accountId: string; dedupeKey: string }) => `${event.accountId}\n${event.dedupeKey}`;

/**
 * Stores events in one statement through `executor` (a transaction of the caller's, or the
 * global handle), each unless the same delivery was stored before (by its account and
 * dedupeKey, also within the batch). The fold is rung through the outbox for every room with a
 * new event or a repeated one still unfolded, once `executor`'s transaction has committed.
 */
export async function storeEvents(executor: Database, events: ConferenceEvent[]): Promise<StoredBatch> {
  const batch: StoredBatch = { isNew: [], added: [] };
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
  }
  // A repeat of a delivery whose event is still unfolded rings the fold again.
  const rooms = [...batch.added, ...(await unfoldedRepeats(executor, repeated))].map(foldKey);
  if (rooms.length > 0) outbox.ring(executor, FOLD_CONSUMER, rooms);
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

/** Once a batch is committed (it is acknowledged then): publishes each new event. Best effort. */
export async function announceStored(batch: StoredBatch): Promise<void> {
  if (batch.added.length === 0) return;
  await ifRedisAnswers(
    "publishing the events",
    batch.added.map((event) => event.id),
    () => Promise.all(batch.added.map((event) => pubsub().publish(EVENT_CHANNEL, JSON.stringify(event)))),
  );
}

/**
 * Stores the event unless the same delivery was stored before; true when it is new. Once the
 * row is committed the event is acknowledged: the fold's ring and publishing it are best
 * effort, since an unfolded row is found by the cdr sweep. A repeat of a delivery whose event
 * is still unfolded rings the fold again. `publish` writes the public catalogue event
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
