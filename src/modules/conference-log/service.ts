/**
 * Appending to the conference event log (its rings: rings.ts; its reads: reads.ts). Every
 * feature that learns a usage fact (a participant joined, a stream started, a phone call ended)
 * appends it here; the cdr worker folds the log into
 * the usage report. Appending is idempotent by dedupeKey. The database is the truth about
 * what is left to fold (conference_events_unfolded, written with the event by a trigger and
 * cleared by the fold's transaction): it is the work table of the outbox's "cdr" consumer,
 * rung per room once the event commits, and the cdr sweep folds whatever a lost ring left
 * behind. So an event is acknowledged once it is stored, whatever Redis does.
 */
import { and, eq, inArray } from "drizzle-orm";
import { type Database, db } from "../../db/client";
import { conferenceEvents, conferenceEventsUnfolded, type EventKind } from "./schema";
import { type ConferenceFacts, eventSyncFacts, isEventSyncKind } from "./event-sync";
import { ringStored } from "./rings";

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

/** What storeEvents stored: which events are new. */
export interface StoredBatch {
  /** Per event, in the order given: true when it is new. */
  isNew: boolean[];
  /** The new events with their ids. */
  added: Array<ConferenceEvent & { id: number }>;
}

/** A delivery's identity: its account and dedupe key. */
const deliveryOf = (event: { accountId: string; dedupeKey: string }) => `${event.accountId}\n${event.dedupeKey}`;

/**
 * Stores events in one statement through `executor` (a transaction of the caller's, or the
 * global handle), each unless the same delivery was stored before (by its account and
 * dedupeKey, also within the batch). Once `executor`'s transaction has committed, the new
 * events and the repeats still unfolded ring their rooms' consumers (rings.ts).
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
        return {
          ...event,
          payload,
          ...(facts ?? (isEventSyncKind(event.kind) ? eventSyncFacts(event.kind, payload) : {})),
        };
      }),
    )
    .onConflictDoNothing({ target: [conferenceEvents.accountId, conferenceEvents.dedupeKey] })
    .returning({
      id: conferenceEvents.id,
      accountId: conferenceEvents.accountId,
      dedupeKey: conferenceEvents.dedupeKey,
    });
  const ids = new Map(inserted.map((row) => [deliveryOf(row), row.id]));
  const repeated: ConferenceEvent[] = [];
  // The facts stay out of what is handed back: the log's readers take them from its columns.
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
  ringStored(executor, batch.added, await unfoldedRepeats(executor, repeated));
  return batch;
}

/** The stored, still unfolded events that the given deliveries repeat. */
async function unfoldedRepeats(
  executor: Database,
  events: ConferenceEvent[],
): Promise<Array<{ id: number; accountId: string; room: string }>> {
  if (events.length === 0) return [];
  // Plain lists the (account, dedupe key) index serves; a pair
  // of one event's account and another's key is dropped after.
  const rows = await executor
    .select({
      id: conferenceEvents.id,
      accountId: conferenceEvents.accountId,
      room: conferenceEvents.room,
      dedupeKey: conferenceEvents.dedupeKey,
    })
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
 * Stores the event unless the same delivery was stored before; true when it is new. Once the
 * row is committed the event is acknowledged: its rings are best effort, since an unfolded
 * row is found by the cdr sweep. A repeat of a delivery whose event
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
  return batch.isNew[0]!;
}
