/**
 * Webhooks, a consumer of the event catalogue: the account's webhook endpoints (their delivery
 * log, manual retries and replays are in ./delivery-log.ts). Every query names the account, so
 * no account ever reaches another's endpoints.
 */
import { createHash, randomBytes } from "node:crypto";
import { and, asc, eq, sql } from "drizzle-orm";
import { type Database, db } from "../../db/client";
import { outbox } from "../../outbox/outbox";
import { AppError } from "../../core/errors";
import { isSealed, openPrivateKey, type StoredPrivateKey, sealPrivateKey } from "../accounts";
import { WEBHOOKS_CONSUMER } from "../catalogue";
import type { Endpoint, EndpointCreate, EndpointUpdate } from "./model";
import { arrayLiteral, rowsOf } from "../../db/rows";
import { webhookEndpoints } from "./schema";
import { checkWebhookUrl } from "./ssrf";
import { syncSlots, THROTTLED_SECONDS } from "./limit-slots";

/** How long a rotated-out secret keeps signing beside the new one. */
export const PREVIOUS_SECRET_HOURS = 24;

type EndpointRow = typeof webhookEndpoints.$inferSelect;

/* ---------- endpoints ---------- */

function endpointOf(row: EndpointRow): Endpoint {
  return {
    id: row.id,
    url: row.url,
    event_types: row.eventTypes,
    description: row.description,
    enabled: row.enabled,
    ordered: row.ordered,
    rate_per_second: row.ratePerSecond,
    rate_burst: row.rateBurst,
    max_in_flight: row.maxInFlight,
    disabled_reason: row.disabledReason,
    failing_since: row.failingSince?.toISOString() ?? null,
    circuit_open_until: row.circuitOpenUntil?.toISOString() ?? null,
    created_at: row.createdAt.toISOString(),
    updated_at: row.updatedAt.toISOString(),
  };
}

/** A Standard Webhooks secret: `whsec_` and 32 random bytes in base64. */
function newSecret(): string {
  return `whsec_${randomBytes(32).toString("base64")}`;
}

const sealSecret = (secret: string) => sealPrivateKey({ secret });
export const openSecret = (stored: EndpointRow["secret"]) => openPrivateKey(stored).secret as string;

/**
 * Seals the secrets (current and previous) an older Parley stored in plain text, in the caller's
 * transaction, once a secret already sealed is found to open with this sealing key. Returns how many
 * endpoints it changed: a second run, here or in a process waiting on the same rows, finds none.
 */
export async function sealPlainSecrets(tx: Database): Promise<number> {
  const [sealed] = await tx
    .select({ secret: webhookEndpoints.secret })
    .from(webhookEndpoints)
    .where(sql`${webhookEndpoints.secret} ->> 'sealed' is not null`)
    .limit(1);
  if (sealed) openSecret(sealed.secret);
  const plain = await tx
    .select({ id: webhookEndpoints.id, secret: webhookEndpoints.secret, previous: webhookEndpoints.previousSecret })
    .from(webhookEndpoints)
    .where(
      sql`${webhookEndpoints.secret} ->> 'sealed' is null
        or (${webhookEndpoints.previousSecret} is not null and ${webhookEndpoints.previousSecret} ->> 'sealed' is null)`,
    )
    .for("update");
  const sealedNow = (stored: StoredPrivateKey) => (isSealed(stored) ? stored : sealPrivateKey(stored));
  for (const { id, secret, previous } of plain) {
    await tx
      .update(webhookEndpoints)
      .set({ secret: sealedNow(secret), previousSecret: previous && sealedNow(previous) })
      .where(eq(webhookEndpoints.id, id));
  }
  return plain.length;
}

export async function createEndpoint(
  accountId: string,
  input: EndpointCreate,
): Promise<{ endpoint: Endpoint; secret: string }> {
  const { url } = await checkWebhookUrl(input.url);
  const secret = newSecret();
  const [row] = await db
    .insert(webhookEndpoints)
    .values({
      id: `wh_${crypto.randomUUID().replaceAll("-", "")}`,
      accountId,
      url: url.toString(),
      eventTypes: input.event_types ?? null,
      description: input.description ?? "",
      enabled: input.enabled ?? true,
      ordered: input.ordered ?? false,
      ratePerSecond: input.rate_per_second ?? null,
      rateBurst: input.rate_burst ?? null,
      maxInFlight: input.max_in_flight ?? null,
      secret: sealSecret(secret),
    })
    .returning();
  await syncSlots(db, row!.id, row!.maxInFlight);
  return { endpoint: endpointOf(row!), secret };
}

export async function endpointRow(accountId: string, id: string): Promise<EndpointRow> {
  const [row] = await db
    .select()
    .from(webhookEndpoints)
    .where(and(eq(webhookEndpoints.accountId, accountId), eq(webhookEndpoints.id, id)));
  if (!row) throw new AppError("not_found", `no webhook endpoint ${id}`);
  return row;
}

/**
 * A webhook URL as the audit log and a read-only operator see it: scheme, host and port, with
 * the path, matrix parameters and query (where receivers keep their tokens: Slack's and
 * Discord's paths, `;jsessionid=`, `?token=`) replaced by `…`, and the first 8 hex digits of
 * the whole URL's SHA-256 to tell two URLs of one host apart. A URL that does not parse keeps nothing.
 */
export function redactedUrl(url: string): string {
  const fingerprint = createHash("sha256").update(url).digest("hex").slice(0, 8);
  const origin = URL.canParse(url) ? new URL(url).origin : "(not a URL)";
  return `${origin}/… sha256:${fingerprint}`;
}

export async function listEndpoints(accountId: string): Promise<Endpoint[]> {
  const rows = await db
    .select()
    .from(webhookEndpoints)
    .where(eq(webhookEndpoints.accountId, accountId))
    .orderBy(asc(webhookEndpoints.createdAt));
  return rows.map(endpointOf);
}

/**
 * The endpoints of every account by state (as their health shows it), and their backlogs, for /metrics: counts, not
 * a series an endpoint, which GET /api/v1/webhooks/{id} answers.
 */
export async function endpointGauges(): Promise<string[]> {
  const rows = rowsOf<{ state: string; endpoints: number; backlog: number }>(
    await db.execute(sql`
      select case when not e.enabled and e.disabled_reason is null then 'paused' when not e.enabled then 'disabled'
          when e.circuit_open_until is not null then 'circuit_open'
          when e.throttled_at > now() - make_interval(secs => ${THROTTLED_SECONDS}) and d.n > 0 then 'throttled'
          else 'healthy' end as state,
        count(*)::integer as endpoints, coalesce(sum(coalesce(d.n, 0) + coalesce(p.n, 0)), 0)::integer as backlog
      from webhook_endpoints e
        left join (select endpoint_id, count(*) as n from webhook_due group by 1) d on d.endpoint_id = e.id
        left join (select endpoint_id, count(*) as n from webhook_parked group by 1) p on p.endpoint_id = e.id
      group by 1`),
  );
  return [
    "# HELP parley_webhook_endpoints Webhook endpoints by state (healthy, throttled, circuit_open, paused, disabled).",
    "# TYPE parley_webhook_endpoints gauge",
    ...rows.map((row) => `parley_webhook_endpoints{state="${row.state}"} ${row.endpoints}`),
    "# HELP parley_webhook_backlog Deliveries left to send, by their endpoint's state.",
    "# TYPE parley_webhook_backlog gauge",
    ...rows.map((row) => `parley_webhook_backlog{state="${row.state}"} ${row.backlog}`),
  ];
}

/** How many of an endpoint's latest attempted deliveries its health figures are of. */
const RECENT = 100;

export async function getEndpoint(accountId: string, id: string): Promise<Endpoint> {
  const endpoint = endpointOf(await endpointRow(accountId, id));
  // The latest by sequence, which its index reads backwards: no scan of the whole log.
  const [figures] = rowsOf<{
    recent: number;
    succeeded: number;
    p50: number | null;
    p99: number | null;
    backlog: number;
    throttled: boolean | null;
  }>(
    await db.execute(sql`
      select count(*)::integer as recent,
        (count(*) filter (where r.last_status_code between 200 and 299))::integer as succeeded,
        percentile_disc(0.5) within group (order by r.last_latency_ms) as p50,
        percentile_disc(0.99) within group (order by r.last_latency_ms) as p99,
        ((select count(*) from webhook_due where endpoint_id = ${id})
          + (select count(*) from webhook_parked where endpoint_id = ${id}))::integer as backlog,
        (select throttled_at > now() - make_interval(secs => ${THROTTLED_SECONDS}) from webhook_endpoints where id = ${id})
          and exists (select from webhook_due where endpoint_id = ${id} and due_at <= now()) as throttled
      from (
        select last_status_code, last_latency_ms from webhook_deliveries
        where endpoint_id = ${id} and last_attempt_at is not null order by sequence desc limit ${RECENT}
      ) r`),
  );
  const state = !endpoint.enabled
    ? endpoint.disabled_reason === null
      ? "paused"
      : "disabled"
    : endpoint.circuit_open_until !== null
      ? "circuit_open"
      : figures!.throttled
        ? "throttled"
        : "healthy";
  return {
    ...endpoint,
    health: {
      state,
      recent: figures!.recent,
      success_rate: figures!.recent === 0 ? null : figures!.succeeded / figures!.recent,
      latency_p50_ms: figures!.p50,
      latency_p99_ms: figures!.p99,
      backlog: figures!.backlog,
    },
  };
}

/**
 * Deletes the due rows of `endpointIds` that no batch holds (one a batch holds is skipped, not waited for); with
 * `behindHead`, only those after each endpoint's earliest.
 */
const deleteUnheldDue = (endpointIds: string[], behindHead = false) => sql`
  delete from webhook_due where ctid = any(array(
    select ctid from webhook_due where endpoint_id = any(${arrayLiteral(endpointIds)}::text[])
    ${behindHead ? sql`and sequence > (select min(h.sequence) from webhook_due h where h.endpoint_id = webhook_due.endpoint_id)` : sql``}
    for update skip locked))`;

/**
 * Sets aside what of `endpointIds` (disabled) is due, into webhook_parked, where no claim reads
 * it; with `behindHead` (an endpoint made ordered) only what is due after its earliest, as if it
 * had come behind it. A due row a batch holds is skipped, not waited for: its batch records it,
 * and an attempt given back or retried stays in the due set, skipped by claims while its endpoint
 * is disabled (or waiting its turn, an ordered endpoint's).
 */
export async function parkDue(handle: Database, endpointIds: string[], behindHead = false): Promise<void> {
  if (endpointIds.length === 0) return;
  await handle.execute(sql`
    with moved as (${deleteUnheldDue(endpointIds, behindHead)} returning delivery_id, endpoint_id, sequence)
    insert into webhook_parked (delivery_id, endpoint_id, sequence)
    -- Not for a delivery gone meanwhile: it could not follow its delivery's deletion.
    select m.* from moved m where exists (select from webhook_deliveries d where d.id = m.delivery_id)
    on conflict (delivery_id) do nothing`);
}

/**
 * Brings forward the next delivery of each enabled ordered endpoint of `endpointIds` ("all": of
 * every one) that has nothing earlier due: the first of its rows set aside, due at once. An
 * ordered endpoint keeps only its head in the due set, since every claim scans the due set and
 * of a backlog behind a failing head only the head may go. Called once a head is done; the
 * sweep calls it for every endpoint, for a delivery set aside while its head was being recorded.
 */
export async function promoteHeads(handle: Database, endpointIds: string[] | "all"): Promise<void> {
  if (endpointIds !== "all" && endpointIds.length === 0) return;
  await handle.execute(sql`
    with head as (
      select h.* from webhook_endpoints e cross join lateral (
        select p.delivery_id, p.endpoint_id, p.sequence from webhook_parked p
        where p.endpoint_id = e.id order by p.sequence limit 1) h
      where ${endpointIds === "all" ? sql`true` : sql`e.id = any(${arrayLiteral(endpointIds)}::text[])`}
        and e.enabled and e.ordered
        and not exists (select from webhook_due d where d.endpoint_id = h.endpoint_id and d.sequence < h.sequence)
    ),
    -- Two callers may pick the same head: the second finds it gone and moves nothing.
    moved as (delete from webhook_parked p using head h where p.delivery_id = h.delivery_id returning p.*)
    insert into webhook_due (delivery_id, endpoint_id, sequence) select * from moved
    on conflict (delivery_id) do nothing`);
}

/**
 * Brings back what of an endpoint (enabled, or no longer ordered) was set aside: due at once, an
 * ordered one's head alone.
 */
async function unparkDue(handle: Database, endpointId: string, ordered: boolean): Promise<void> {
  if (ordered) return promoteHeads(handle, [endpointId]);
  await handle.execute(sql`
    with moved as (delete from webhook_parked where endpoint_id = ${endpointId} returning delivery_id, endpoint_id, sequence)
    insert into webhook_due (delivery_id, endpoint_id, sequence, due_at)
    select delivery_id, endpoint_id, sequence, now() from moved
    on conflict (delivery_id) do update set due_at = least(webhook_due.due_at, excluded.due_at)`);
}

export async function updateEndpoint(accountId: string, id: string, input: EndpointUpdate): Promise<Endpoint> {
  const url = input.url === undefined ? undefined : (await checkWebhookUrl(input.url)).url.toString();
  const enabling = input.enabled === true;
  // With what it sets aside or brings back: an endpoint enabled must not leave its deliveries set aside.
  const row = await db.transaction(async (tx) => {
    const [updated] = await tx
      .update(webhookEndpoints)
      .set({
        ...(url !== undefined && { url }),
        ...(input.event_types !== undefined && { eventTypes: input.event_types }),
        ...(input.description !== undefined && { description: input.description }),
        ...(input.ordered !== undefined && { ordered: input.ordered }),
        // A new rate starts with a full bucket (see limits.ts).
        ...(input.rate_per_second !== undefined && { ratePerSecond: input.rate_per_second, rateTokens: null }),
        ...(input.rate_burst !== undefined && { rateBurst: input.rate_burst, rateTokens: null }),
        ...(input.max_in_flight !== undefined && { maxInFlight: input.max_in_flight }),
        ...(input.enabled !== undefined && { enabled: input.enabled }),
        // Enabling starts afresh: the reason, the failure run and the breaker of the last disable are over.
        ...(enabling && {
          disabledReason: null,
          failingSince: null,
          circuitOpenUntil: null,
          windowStartedAt: null,
          windowAttempts: 0,
          windowFailures: 0,
        }),
        updatedAt: sql`now()`,
      })
      .where(and(eq(webhookEndpoints.accountId, accountId), eq(webhookEndpoints.id, id)))
      .returning();
    if (!updated) throw new AppError("not_found", `no webhook endpoint ${id}`);
    if (input.max_in_flight !== undefined) await syncSlots(tx, id, updated.maxInFlight);
    if (input.enabled === false) await parkDue(tx, [id]);
    else if (updated.enabled && (enabling || input.ordered === false)) {
      await unparkDue(tx, id, updated.ordered);
      // Its pending deliveries may go now, not at the next sweep.
      outbox.ring(tx, WEBHOOKS_CONSUMER);
    } else if (updated.enabled && input.ordered === true) await parkDue(tx, [id], true);
    return updated;
  });
  return endpointOf(row);
}

/**
 * Deletes an endpoint, its deliveries (by their foreign key) and what of them is due. A due row a
 * batch holds is skipped, not waited for (the batch drops it); left due, the rest would each be
 * dropped by a claim, and a claim that finds only those answers as if nothing were due, so what
 * comes after them would wait for the sweep.
 */
export async function deleteEndpoint(accountId: string, id: string): Promise<void> {
  await db.transaction(async (tx) => {
    const removed = await tx
      .delete(webhookEndpoints)
      .where(and(eq(webhookEndpoints.accountId, accountId), eq(webhookEndpoints.id, id)))
      .returning({ id: webhookEndpoints.id });
    if (removed.length === 0) throw new AppError("not_found", `no webhook endpoint ${id}`);
    await tx.execute(deleteUnheldDue([id]));
  });
}

/** A new secret, shown once; the old one keeps signing beside it for PREVIOUS_SECRET_HOURS so receivers can switch. */
export async function rotateSecret(accountId: string, id: string): Promise<{ endpoint: Endpoint; secret: string }> {
  const secret = newSecret();
  const [row] = await db
    .update(webhookEndpoints)
    .set({
      previousSecret: sql`${webhookEndpoints.secret}`,
      previousSecretUntil: sql`now() + make_interval(hours => ${PREVIOUS_SECRET_HOURS})`,
      secret: sealSecret(secret),
      updatedAt: sql`now()`,
    })
    .where(and(eq(webhookEndpoints.accountId, accountId), eq(webhookEndpoints.id, id)))
    .returning();
  if (!row) throw new AppError("not_found", `no webhook endpoint ${id}`);
  return { endpoint: endpointOf(row), secret };
}
