/**
 * The transactional outbox: a feature records a catalogue event with the transaction handle
 * of the change it describes, so the event exists exactly when the change committed. The
 * same statement queues one delivery per endpoint that wants the event (its log row in
 * webhook_deliveries, and a row in webhook_due, the webhooks consumer's work table, or in
 * webhook_parked behind an ordered endpoint's earlier delivery); once
 * the transaction has committed, the outbox rings the webhooks workers and the account's
 * event streams in every process.
 */
import { sql } from "drizzle-orm";
import type { Database } from "../../db/client";
import { executePlannedOnce } from "../../db/planned-once";
import { rowsOf } from "../../db/rows";
import { outbox } from "../../outbox/outbox";
import type { EventData, EventType } from "./model";

/** The outbox consumer (core/outbox) that sends due deliveries: the webhooks worker. */
export const WEBHOOKS_CONSUMER = "webhooks";
/** The outbox consumer that wakes an account's event streams (keys: account ids), in API processes. */
export const EVENT_STREAMS_CONSUMER = "events-stream";

/**
 * Records a catalogue event inside the caller's transaction (pass the transaction handle,
 * never the global one). One statement takes the account's next sequence number (its row
 * lock orders the account's writers until commit), stores the event and queues a delivery
 * to every enabled endpoint of the account that wants this type; once the transaction has
 * committed, the outbox rings the webhooks worker and the account's event streams.
 */
export function recordEvent<T extends EventType>(
  tx: Database,
  accountId: string,
  type: T,
  data: EventData<T>,
): Promise<void> {
  return recordEvents(tx, accountId, type, [data]);
}

/** Records several events of one type and account in one statement, in the given order (see recordEvent). */
export async function recordEvents<T extends EventType>(
  tx: Database,
  accountId: string,
  type: T,
  data: Array<EventData<T>>,
): Promise<void> {
  if (data.length === 0) return;
  const items = data.map((item) => ({ id: `evt_${crypto.randomUUID().replaceAll("-", "")}`, data: item }));
  const [row] = rowsOf<{ queued: string | number }>(
    await executePlannedOnce(
      tx,
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
        returning id, endpoint_id, sequence
      ),
      -- An ordered endpoint's delivery behind an earlier one of it (this statement's first, or one already due or set
      -- aside) is set aside (see webhookParked).
      placed as (
        select q.*, case when e.ordered then
            q.sequence > (select min(sequence) from stored)
            or exists (select from webhook_due d where d.endpoint_id = q.endpoint_id)
            or exists (select from webhook_parked p where p.endpoint_id = q.endpoint_id)
          else false end as behind
        from queued q join webhook_endpoints e on e.id = q.endpoint_id
      ),
      parked as (
        insert into webhook_parked (delivery_id, endpoint_id, sequence)
        select id, endpoint_id, sequence from placed where behind
      ),
      due as (
        insert into webhook_due (delivery_id, endpoint_id, sequence)
        select id, endpoint_id, sequence from placed where not behind
        returning 1
      )
      select count(*) as queued from due`,
    ),
  );
  if (Number(row?.queued ?? 0) > 0) outbox.ring(tx, WEBHOOKS_CONSUMER);
  outbox.ring(tx, EVENT_STREAMS_CONSUMER, [accountId]);
}
