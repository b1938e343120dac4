/**
 * Sending deliveries, following the Standard Webhooks specification: a POST of the event's
 * JSON with `webhook-id` (the event id, the same on every retry), `webhook-timestamp` and
 * `webhook-signature` (`v1,` and the base64 HMAC-SHA256 of `id.timestamp.body` under the
 * secret; during a rotation the old secret's signature follows, space-separated).
 *
 * The delivery row is the truth. An attempt first claims the row (a lease, so two workers
 * never send it at once and a worker killed mid-attempt only delays it), then records the
 * outcome and the next attempt in one transaction; the queued job only rings the doorbell.
 */
import { createHmac } from "node:crypto";
import { sql } from "drizzle-orm";
import { config } from "../../config";
import { db } from "../../db/client";
import { AppError } from "../../core/errors";
import { log } from "../../core/log";
import type { StoredPrivateKey } from "../accounts/sealing";
import { type Due, ringDeliveries, ringDelivery, rowsOf } from "./outbox";
import { openSecret } from "./service";
import { checkWebhookUrl } from "./ssrf";

/** How much of an answer the delivery log keeps. */
const RESPONSE_BYTES = 1024;

/** The Standard Webhooks signature of one message under one `whsec_` secret. */
export function signature(secret: string, messageId: string, timestamp: number, body: string): string {
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  return `v1,${createHmac("sha256", key).update(`${messageId}.${timestamp}.${body}`).digest("base64")}`;
}

interface Claimed {
  id: string | number;
  attempts: number;
  endpoint_id: string;
  url: string;
  ordered: boolean;
  secret: StoredPrivateKey;
  previous_secret: StoredPrivateKey | null;
  previous_secret_until: string | Date | null;
  event_id: string;
  account_id: string;
  type: string;
  sequence: string | number;
  data: Record<string, unknown> | string;
  created_at: string | Date;
}

/** Deliveries an ordered endpoint may not send yet: an earlier event of it is still pending. */
const WAITS_FOR_EARLIER = sql`exists (select 1 from webhook_deliveries p where p.endpoint_id = d.endpoint_id and p.status = 'pending' and p.sequence < d.sequence)`;

/**
 * Delivery bookkeeping commits without waiting for the WAL flush (set for its own statement
 * only): a database crash can forget only the last moment's attempts, and a forgotten claim
 * or success means the delivery is sent again, which at-least-once allows (receivers
 * de-duplicate by webhook-id). Events and their delivery rows are written by the feature's
 * transaction and flushed as usual.
 */
const NO_FLUSH = sql`(select set_config('synchronous_commit', 'off', true)) as no_flush`;

/** Takes the given deliveries for one attempt each, those pending, due, not leased and with their endpoint enabled. */
async function claim(deliveryIds: number[]): Promise<Claimed[]> {
  const leaseSeconds = config.webhooks.timeoutMs / 1000 + 5;
  // One statement for the whole batch: the bookkeeping, not the sending, is most of a worker's work.
  return rowsOf<Claimed>(
    await db.execute(sql`
      update webhook_deliveries d
      set attempts = d.attempts + 1, leased_until = now() + make_interval(secs => ${leaseSeconds}), last_attempt_at = now()
      from webhook_endpoints e, events ev, ${NO_FLUSH}
      where d.id in (select jsonb_array_elements_text(${JSON.stringify(deliveryIds)}::jsonb)::bigint) and d.status = 'pending'
        -- A delayed job may fire a little before the database's clock says it is due.
        and d.next_attempt_at <= now() + interval '1 second'
        and (d.leased_until is null or d.leased_until < now())
        and e.id = d.endpoint_id and e.enabled and ev.id = d.event_id
        and not (e.ordered and ${WAITS_FOR_EARLIER})
      returning d.id, d.attempts, d.endpoint_id, e.url, e.ordered, e.secret, e.previous_secret, e.previous_secret_until,
        ev.id as event_id, ev.account_id, ev.type, ev.sequence, ev.data, ev.created_at`),
  );
}

/** The body exactly as signed: the event's catalogue shape. */
function bodyOf(row: Claimed): string {
  return JSON.stringify({
    id: row.event_id,
    type: row.type,
    account_id: row.account_id,
    created_at: new Date(row.created_at).toISOString(),
    sequence: Number(row.sequence),
    data: typeof row.data === "string" ? JSON.parse(row.data) : row.data,
  });
}

async function firstBytes(response: Response): Promise<string> {
  if (!response.body) return "";
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  while (size < RESPONSE_BYTES) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    size += value.length;
  }
  await reader.cancel().catch(() => {});
  return Buffer.concat(chunks).subarray(0, RESPONSE_BYTES).toString("utf8");
}

interface Outcome {
  statusCode: number | null;
  response: string;
  latencyMs: number;
}

async function send(row: Claimed): Promise<Outcome> {
  const started = performance.now();
  const body = bodyOf(row);
  const timestamp = Math.floor(Date.now() / 1000);
  const signatures = [signature(openSecret(row.secret), row.event_id, timestamp, body)];
  if (row.previous_secret && row.previous_secret_until && new Date(row.previous_secret_until) > new Date()) {
    signatures.push(signature(openSecret(row.previous_secret), row.event_id, timestamp, body));
  }
  try {
    // Checked again at each attempt: the name may have been rebound to an internal address.
    const target = await checkWebhookUrl(row.url);
    const headers: Record<string, string> = {
      "content-type": "application/json",
      "user-agent": "Parley-Webhooks/1",
      "webhook-id": row.event_id,
      "webhook-timestamp": String(timestamp),
      "webhook-signature": signatures.join(" "),
    };
    let url = target.url.toString();
    if (target.url.protocol === "http:") {
      // Connect to the address just checked, so a second lookup cannot hand out another one.
      const pinned = new URL(target.url);
      pinned.hostname = target.address.includes(":") ? `[${target.address}]` : target.address;
      headers.host = target.url.host;
      url = pinned.toString();
    }
    const response = await fetch(url, { method: "POST", headers, body, redirect: "manual", signal: AbortSignal.timeout(config.webhooks.timeoutMs) });
    const answer = await firstBytes(response);
    return { statusCode: response.status, response: answer, latencyMs: Math.round(performance.now() - started) };
  } catch (error) {
    const message = error instanceof AppError ? `refused: ${error.message}` : (error as Error).name === "TimeoutError" ? `no answer within ${config.webhooks.timeoutMs} ms` : (error as Error).message;
    return { statusCode: null, response: message.slice(0, RESPONSE_BYTES), latencyMs: Math.round(performance.now() - started) };
  }
}

/** Records a failed attempt and when to try next, and disables an endpoint that is gone or has failed too long. */
async function recordFailure(row: Claimed, outcome: Outcome): Promise<{ retryInMs?: number }> {
  const waitSeconds = config.webhooks.retrySchedule[row.attempts - 1];
  const status = waitSeconds === undefined ? "failed" : "pending";
  const gone = outcome.statusCode === 410;
  const disableAfter = sql`make_interval(secs => ${config.webhooks.disableAfterSeconds})`;
  // One statement (two data-modifying parts): the outcome, the retry and the endpoint's state commit together.
  const [endpoint] = rowsOf<{ enabled: boolean; disabled_reason: string | null }>(
    await db.execute(sql`
      with delivery as (
        update webhook_deliveries set status = ${status}, leased_until = null,
          next_attempt_at = ${status === "pending" ? sql`now() + make_interval(secs => ${waitSeconds})` : sql`next_attempt_at`},
          last_status_code = ${outcome.statusCode}, last_latency_ms = ${outcome.latencyMs}, last_response = ${outcome.response}
        where id = ${Number(row.id)}
      ),
      endpoint as (
        update webhook_endpoints set
          failing_since = coalesce(failing_since, now()),
          enabled = enabled and not ${gone} and coalesce(failing_since, now()) > now() - ${disableAfter},
          disabled_reason = case
            when not enabled then disabled_reason
            when ${gone} then 'the receiver answered 410 Gone'
            when coalesce(failing_since, now()) <= now() - ${disableAfter}
              then 'every attempt failed since ' || to_char(failing_since at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
            else disabled_reason end,
          updated_at = now()
        where id = ${row.endpoint_id}
        returning enabled, disabled_reason
      )
      select enabled, disabled_reason from ${NO_FLUSH} left join endpoint on true`),
  );
  if (endpoint && !endpoint.enabled) log.warn({ endpointId: row.endpoint_id, reason: endpoint.disabled_reason }, "webhook endpoint disabled");
  return status === "pending" && endpoint?.enabled ? { retryInMs: waitSeconds! * 1000 } : {};
}

/** The earliest pending delivery of an ordered endpoint, which may go now that the one before it went. */
async function ringNextInOrder(endpointId: string): Promise<void> {
  const [next] = rowsOf<{ id: string | number; attempts: number }>(
    await db.execute(sql`
      select id, attempts from webhook_deliveries
      where endpoint_id = ${endpointId} and status = 'pending' order by sequence limit 1`),
  );
  if (next) await ringDelivery(Number(next.id), next.attempts);
}

const isSuccess = (outcome: Outcome) => outcome.statusCode !== null && outcome.statusCode >= 200 && outcome.statusCode < 300;

/** Records the successes of a batch in one statement, and clears their endpoints' failure runs. */
async function recordSuccesses(sent: Array<{ row: Claimed; outcome: Outcome }>): Promise<void> {
  if (sent.length === 0) return;
  const outcomes = sent.map(({ row, outcome }) => ({ id: Number(row.id), code: outcome.statusCode, latency: outcome.latencyMs, response: outcome.response }));
  const endpoints = [...new Set(sent.map(({ row }) => row.endpoint_id))];
  await db.execute(sql`
    with outcome as (
      select * from jsonb_to_recordset(${JSON.stringify(outcomes)}::jsonb) as o(id bigint, code integer, latency integer, response text)
    ),
    delivered as (
      update webhook_deliveries d set status = 'succeeded', leased_until = null,
        last_status_code = o.code, last_latency_ms = o.latency, last_response = o.response
      from outcome o where d.id = o.id
    ),
    healthy as (
      update webhook_endpoints set failing_since = null
      where id in (select jsonb_array_elements_text(${JSON.stringify(endpoints)}::jsonb)) and failing_since is not null
    )
    select 1 from ${NO_FLUSH}`);
}

/**
 * One attempt of each given delivery that is still due; what a webhooks job does. The batch
 * is claimed in one statement and sent concurrently; successes are recorded in one
 * statement, each failure with its own retry.
 */
export async function attemptDeliveries(deliveryIds: number[]): Promise<{ succeeded: number; failed: number }> {
  if (deliveryIds.length === 0) return { succeeded: 0, failed: 0 };
  const claimed = await claim(deliveryIds);
  const sent = await Promise.all(claimed.map(async (row) => ({ row, outcome: await send(row) })));
  const succeeded = sent.filter(({ outcome }) => isSuccess(outcome));
  await recordSuccesses(succeeded);
  const retries: Array<Due & { delayMs: number }> = [];
  for (const { row, outcome } of sent) {
    if (isSuccess(outcome)) continue;
    const { retryInMs } = await recordFailure(row, outcome);
    if (retryInMs !== undefined) retries.push({ id: Number(row.id), attempts: row.attempts, delayMs: retryInMs });
  }
  for (const retry of retries) await ringDelivery(retry.id, retry.attempts, retry.delayMs);
  for (const endpointId of new Set(succeeded.filter(({ row }) => row.ordered).map(({ row }) => row.endpoint_id))) await ringNextInOrder(endpointId);
  return { succeeded: succeeded.length, failed: sent.length - succeeded.length };
}

/**
 * Queues every delivery that is due and not being sent, straight from the database: its job
 * was lost with Redis, its worker died mid-attempt, or its endpoint was enabled again.
 * Without Redis the caller passes a handler that sends each one itself. Answers how many it found.
 */
export async function sweepDueDeliveries(limit = 1_000, handle: (due: Due[]) => Promise<unknown> = ringDeliveries): Promise<number> {
  const due = rowsOf<{ id: string | number; attempts: number }>(
    await db.execute(sql`
      select d.id, d.attempts from webhook_deliveries d join webhook_endpoints e on e.id = d.endpoint_id
      where d.status = 'pending' and d.next_attempt_at <= now() and (d.leased_until is null or d.leased_until < now())
        and e.enabled and not (e.ordered and ${WAITS_FOR_EARLIER})
      order by d.next_attempt_at limit ${limit}`),
  );
  await handle(due.map((row) => ({ id: Number(row.id), attempts: row.attempts })));
  return due.length;
}
