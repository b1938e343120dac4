/**
 * The transactional outbox: a feature records a catalogue event with the transaction handle
 * of the change it describes, so the event exists exactly when the change committed. The
 * same statement queues one delivery per endpoint that wants the event; once the transaction
 * has committed, the webhooks doorbell is rung and local event streams are woken.
 */
import { EventEmitter } from "node:events";
import { sql } from "drizzle-orm";
import { afterCommit, type Database } from "../../db/client";
import { executePrepared } from "../../db/prepared";
import { rowsOf } from "../../db/rows";
import { log } from "../../core/log";
import { PROMPT_REDIS_MS } from "../../queue/connection";
import { pubsub } from "../../queue/redis-pubsub";
import type { EventData, EventType } from "./model";

/** Wakes this process's event streams of an account as soon as one of its events commits. */
export const committedEvents = new EventEmitter().setMaxListeners(0);

/** Wakes this process's webhooks worker, without a trip through Redis, when deliveries are due. */
export const dueDeliveries = new EventEmitter().setMaxListeners(0);

/** The channel that wakes the webhooks workers of other processes. */
export const DOORBELL_CHANNEL = "webhooks:due";

/**
 * Tells the webhooks workers that deliveries are due now: a wake-up with nothing in it, since
 * each worker claims what is due straight from the database. Best effort: a worker that
 * misses it (Redis away, not yet subscribed) finds the deliveries on its next sweep.
 */
export async function ringDoorbell(): Promise<void> {
  dueDeliveries.emit("due");
  await pubsub().publish(DOORBELL_CHANNEL, "", { withinMs: PROMPT_REDIS_MS }).catch((error: Error) =>
    log.warn({ err: error.message }, "webhooks doorbell not rung: the webhooks sweep finds the deliveries"),
  );
}

/** Open transactions that have queued a delivery: each rings the doorbell once, after it commits. */
const ringsAfterCommit = new WeakSet<Database>();

/**
 * Records a catalogue event inside the caller's transaction (pass the transaction handle,
 * never the global one). One statement takes the account's next sequence number (its row
 * lock orders the account's writers until commit), stores the event and queues a delivery
 * to every enabled endpoint of the account that wants this type.
 */
export function recordEvent<T extends EventType>(tx: Database, accountId: string, type: T, data: EventData<T>): Promise<void> {
  return recordEvents(tx, accountId, type, [data]);
}

/** Records several events of one type and account in one statement, in the given order (see recordEvent). */
export async function recordEvents<T extends EventType>(tx: Database, accountId: string, type: T, data: Array<EventData<T>>): Promise<void> {
  if (data.length === 0) return;
  const items = data.map((item) => ({ id: `evt_${crypto.randomUUID().replaceAll("-", "")}`, data: item }));
  const [row] = rowsOf<{ queued: string | number }>(
    await executePrepared(
      tx,
      "webhooks_record_events",
      sql`
      with next as (
        insert into event_sequences as s (account_id, last_sequence) values (${accountId}, ${items.length})
        on conflict (account_id) do update set last_sequence = s.last_sequence + ${items.length}
        returning last_sequence
      ),
      stored as (
        insert into events (id, account_id, sequence, type, data, created_at)
        select i.item->>'id', ${accountId}, next.last_sequence - ${items.length} + i.n, ${type}, i.item->'data', clock_timestamp()
        from next, jsonb_array_elements(${JSON.stringify(items)}::jsonb) with ordinality as i(item, n)
        order by i.n
        returning id, sequence
      ),
      queued as (
        insert into webhook_deliveries (account_id, endpoint_id, event_id, sequence)
        select e.account_id, e.id, stored.id, stored.sequence from webhook_endpoints e, stored
        where e.account_id = ${accountId} and e.enabled and (e.event_types is null or e.event_types ? ${type})
        order by stored.sequence, e.id
        returning 1
      )
      select count(*) as queued from queued`,
    ),
  );
  if (Number(row?.queued ?? 0) > 0 && !ringsAfterCommit.has(tx)) {
    ringsAfterCommit.add(tx);
    afterCommit(() => {
      ringsAfterCommit.delete(tx);
      return ringDoorbell();
    });
  }
  afterCommit(() => committedEvents.emit(accountId));
}
