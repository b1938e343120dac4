/**
 * An endpoint's delivery log as its account reads it, and what the account may do to it by hand:
 * send one delivery again, or replay the catalogue's kept events to the endpoint. Apart from
 * ./service.ts (the endpoints themselves): these write the log and the due set, never an endpoint.
 * Every query names the account, so no account ever reaches another's deliveries.
 */
import { and, desc, eq, lt, sql } from "drizzle-orm";
import { db } from "../../db/client";
import { rowsOf } from "../../db/rows";
import { outbox } from "../../outbox/outbox";
import { AppError } from "../../core/errors";
import { events, WEBHOOKS_CONSUMER } from "../catalogue";
import type { Delivery } from "./model";
import { webhookDeliveries } from "./schema";
import { endpointRow, promoteHeads } from "./service";

export async function listDeliveries(
  accountId: string,
  endpointId: string,
  query: { before?: number; status?: Delivery["status"]; limit?: number },
): Promise<Delivery[]> {
  await endpointRow(accountId, endpointId);
  const rows = await db
    .select({ delivery: webhookDeliveries, type: events.type })
    .from(webhookDeliveries)
    .innerJoin(events, eq(events.id, webhookDeliveries.eventId))
    .where(
      and(
        eq(webhookDeliveries.accountId, accountId),
        eq(webhookDeliveries.endpointId, endpointId),
        query.before === undefined ? undefined : lt(webhookDeliveries.id, query.before),
        query.status === undefined ? undefined : eq(webhookDeliveries.status, query.status),
      ),
    )
    .orderBy(desc(webhookDeliveries.id))
    .limit(query.limit ?? 100);
  return rows.map(({ delivery, type }) => ({
    id: delivery.id,
    event_id: delivery.eventId,
    event_type: type,
    sequence: Number(delivery.sequence),
    status: delivery.status as Delivery["status"],
    attempts: delivery.attempts,
    last_attempt_at: delivery.lastAttemptAt?.toISOString() ?? null,
    status_code: delivery.lastStatusCode,
    latency_ms: delivery.lastLatencyMs,
    response: delivery.lastResponse,
    next_attempt_at: delivery.status === "pending" ? delivery.nextAttemptAt.toISOString() : null,
  }));
}

/**
 * The `retried` deliveries (id, endpoint_id, sequence) due now in the due set, whether or not
 * they were due already (a row a batch holds is waited for, then added anew); set aside instead
 * while their endpoint is disabled, and for an ordered endpoint unless already due (its head is
 * then brought forward by promoteHeads, after the statement). The endpoint's row is read locked,
 * so an enable or disable under way is waited for and seen: nothing is set aside behind an enable.
 */
const DUE_NOW = sql`
  endpoint as materialized (
    select e.id, e.enabled, e.ordered from webhook_endpoints e where e.id in (select endpoint_id from retried) for share
  ),
  placed as (
    select r.*, e.enabled and (not e.ordered or exists (select from webhook_due d where d.delivery_id = r.id)) as due
    from retried r join endpoint e on e.id = r.endpoint_id
  ),
  due as (
    insert into webhook_due (delivery_id, endpoint_id, sequence, due_at)
    select id, endpoint_id, sequence, now() from placed where due
    on conflict (delivery_id) do update set due_at = now()
  ),
  parked as (
    insert into webhook_parked (delivery_id, endpoint_id, sequence)
    select id, endpoint_id, sequence from placed where not due
    on conflict (delivery_id) do nothing
  )`;

/** Sends one delivery again now, whatever became of it; its receiver de-duplicates by webhook-id. */
export async function retryDelivery(accountId: string, endpointId: string, deliveryId: number): Promise<void> {
  // Raw SQL: drizzle cannot write the log row and the due set in one statement.
  const [row] = rowsOf<{ id: string | number }>(
    await db.execute(sql`
      with retried as (
        update webhook_deliveries set status = 'pending', next_attempt_at = now()
        where account_id = ${accountId} and endpoint_id = ${endpointId} and id = ${deliveryId}
        returning id, endpoint_id, sequence
      ),
      ${DUE_NOW}
      select id from retried`),
  );
  if (!row) throw new AppError("not_found", `no delivery ${deliveryId} of webhook endpoint ${endpointId}`);
  await promoteHeads(db, [endpointId]);
  outbox.ring(db, WEBHOOKS_CONSUMER);
}

/**
 * Queues every kept event of the account since a time or after a sequence number (of the
 * types the endpoint takes) to the endpoint again: a new delivery where there was none, and
 * a delivery made before sent once more.
 */
export async function replay(
  accountId: string,
  endpointId: string,
  from: { since?: string; after?: number },
): Promise<number> {
  if ((from.since === undefined) === (from.after === undefined))
    throw new AppError("validation_failed", "give exactly one of since (a time) and after (a sequence number)");
  const since = from.since === undefined ? undefined : new Date(from.since);
  if (since && Number.isNaN(since.getTime()))
    throw new AppError("validation_failed", `since: not a time: "${from.since}"`);
  const endpoint = await endpointRow(accountId, endpointId);
  const queued = rowsOf<{ id: string | number }>(
    await db.execute(sql`
      with retried as (
        insert into webhook_deliveries (account_id, endpoint_id, event_id, sequence)
        select ev.account_id, ${endpointId}, ev.id, ev.sequence from events ev
        where ev.account_id = ${accountId}
          and ${since ? sql`ev.created_at >= ${since.toISOString()}::timestamptz` : sql`ev.sequence > ${from.after!}`}
          and (${endpoint.eventTypes === null ? sql`true` : sql`ev.type in (select jsonb_array_elements_text(${JSON.stringify(endpoint.eventTypes)}::jsonb))`})
        on conflict (endpoint_id, event_id) do update set status = 'pending', next_attempt_at = now()
        returning id, endpoint_id, sequence
      ),
      ${DUE_NOW}
      select id from retried`),
  );
  if (queued.length > 0) {
    await promoteHeads(db, [endpointId]);
    outbox.ring(db, WEBHOOKS_CONSUMER);
  }
  return queued.length;
}
