/**
 * The transactional outbox: a feature records a catalogue event with the transaction handle
 * of the change it describes, so the event exists exactly when the change committed. The
 * same statement queues one delivery per endpoint that wants the event; once the transaction
 * has committed, the deliveries' doorbells are rung and local event streams are woken.
 */
import { EventEmitter } from "node:events";
import { sql } from "drizzle-orm";
import { afterCommit, type Database } from "../../db/client";
import { log } from "../../core/log";
import { redis } from "../../queue/connection";
import { getQueue, QUEUE_NAMES, WEBHOOK_DELIVER_JOB, type WebhookDeliverJob } from "../../queue/queues";
import type { EventData, EventType } from "./model";

/** Rows of a raw query: postgres.js answers an array, PGlite an object with `rows`. */
export function rowsOf<T>(result: unknown): T[] {
  return Array.isArray(result) ? (result as T[]) : ((result as { rows: T[] }).rows ?? []);
}

/** Wakes this process's event streams of an account as soon as one of its events commits. */
export const committedEvents = new EventEmitter().setMaxListeners(0);

/** How long ringing a doorbell waits for Redis; the webhooks sweep finds the delivery anyway. */
const REDIS_WAIT_MS = 1_000;

/** Deliveries one job sends together: one claim and one record for all of them. */
export const DELIVERY_BATCH = 32;

export interface Due {
  id: number;
  /** Attempts made so far: a job is named by the attempt it makes. */
  attempts: number;
}

/**
 * Queues the jobs that send deliveries now (or after `delayMs`), up to DELIVERY_BATCH per
 * job. A job is named by its deliveries and their attempt, so the job queued after a commit
 * and the one the sweep queues for the same attempt are one job (and were it not, the second
 * finds the deliveries taken). Best effort: without Redis the sweep sends them.
 */
export async function ringDeliveries(due: Due[], delayMs = 0, asked = false): Promise<void> {
  if (due.length === 0 || ["reconnecting", "close", "end"].includes(redis().status)) return;
  const queue = getQueue(QUEUE_NAMES.webhooks);
  for (let i = 0; i < due.length; i += DELIVERY_BATCH) {
    const batch = due.slice(i, i + DELIVERY_BATCH);
    const first = batch[0]!;
    const job: WebhookDeliverJob = { deliveryIds: batch.map((delivery) => delivery.id) };
    const attemptId = batch.length === 1 ? `${first.id}-${first.attempts}` : `${first.id}-${first.attempts}-${batch.at(-1)!.id}`;
    // A retry or replay someone asked for is a job of its own: under the attempt's name it would be
    // swallowed by the job already waiting out that attempt's backoff, and go only when that ends.
    const jobId = asked ? `${attemptId}-asked-${Date.now().toString(36)}` : attemptId;
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      await Promise.race([
        queue.add(WEBHOOK_DELIVER_JOB, job, { jobId, delay: delayMs, removeOnComplete: true, removeOnFail: true }),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error(`no answer within ${REDIS_WAIT_MS} ms`)), REDIS_WAIT_MS);
        }),
      ]);
    } catch (error) {
      log.warn({ deliveries: job.deliveryIds, err: (error as Error).message }, "queueing webhook deliveries failed: the webhooks sweep queues them");
      return;
    } finally {
      clearTimeout(timer);
    }
  }
}

export const ringDelivery = (id: number, attempts: number, delayMs = 0, asked = false) => ringDeliveries([{ id, attempts }], delayMs, asked);

/** The deliveries each open transaction has queued, rung together once it commits. */
const queuedInTransaction = new WeakMap<Database, Due[]>();

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
  const [row] = rowsOf<{ deliveries: Array<number | string> }>(
    await tx.execute(sql`
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
        returning id
      )
      select coalesce((select json_agg(id) from queued), '[]'::json) as deliveries`),
  );
  const deliveries = (row?.deliveries ?? []).map((id) => ({ id: Number(id), attempts: 0 }));
  let queued = queuedInTransaction.get(tx);
  if (!queued) {
    const due: Due[] = [];
    queued = due;
    queuedInTransaction.set(tx, due);
    afterCommit(() => {
      queuedInTransaction.delete(tx);
      return ringDeliveries(due);
    });
  }
  queued.push(...deliveries);
  afterCommit(() => committedEvents.emit(accountId));
}
