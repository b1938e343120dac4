/**
 * Sending deliveries, following the Standard Webhooks specification: a POST of the event's
 * JSON with `webhook-id` (the event id, the same on every retry), `webhook-timestamp` and
 * `webhook-signature` (`v1,` and the base64 HMAC-SHA256 of `id.timestamp.body` under the
 * secret; during a rotation the old secret's signature follows, space-separated).
 *
 * The database is the truth: webhook_due holds what is left to send, webhook_deliveries the
 * log. A worker claims due rows straight from the database, so two workers never send one at
 * once, then records the outcomes. On PostgreSQL a batch's transaction deletes the due rows it
 * claims and stays open while the batch is sent, then commits its outcomes in one statement
 * (claimLocked, recordLocked): a success costs the log row's HOT update and nothing else, and
 * a worker killed mid-attempt ends its transaction, so the rows are due again at once. The
 * embedded database (one connection) cannot hold a transaction open while sending, so there
 * a claim is a lease, the due row moved past it (claimDue), and the successes of many
 * attempts are recorded in one statement, each failure with its next attempt.
 *
 * Longer than 400 lines on purpose: the claim, the send and the record of a batch are one
 * protocol with the due set (what a claim takes out, a record or a release must put back), and
 * both drivers' forms of it sit side by side so that a change to one is made to the other.
 */
import { type SQL, sql } from "drizzle-orm";
import { config } from "../../core/config";
import { type Database, db } from "../../db/client";
import { AppError } from "../../core/errors";
import type { StoredPrivateKey } from "../accounts";
import { arrayLiteral, rowsOf } from "../../db/rows";
import { openSecret, parkDue, promoteHeads } from "./service";
import { checkWebhookUrl, type WebhookTarget } from "./ssrf";
import { type Destination, post } from "./http1";
import { countOutcomes, countsOf, endpointEvent } from "./circuit";

/** How much of an answer the delivery log keeps. */
const RESPONSE_BYTES = 1024;

/** The HMAC key of a `whsec_` secret, and a Standard Webhooks signature of one message under it. */
const signingKey = (secret: string) => Buffer.from(secret.replace(/^whsec_/, ""), "base64");
// Bun's own hasher: half the cost of node:crypto's createHmac, which wraps the key in an object at each call.
const sign = (key: Buffer, messageId: string, timestamp: number, body: string) =>
  `v1,${new Bun.CryptoHasher("sha256", key).update(`${messageId}.${timestamp}.${body}`).digest("base64")}`;

/**
 * The columns of a claimed delivery that claimLocked reads from its endpoint; the account is its event's too, since
 * an endpoint is sent only its own account's events.
 */
type EndpointColumn = "account_id" | "url" | "ordered" | "failing" | "secret" | "previous_secret";

export interface Claimed {
  id: string | number;
  attempts: number;
  /** The claim's lease, exactly as stored; empty for a claim held by row locks. */
  lease: string;
  /** The place of its endpoint's max_in_flight it holds (see endpoint-limits.ts). */
  slot?: number;
  /** Claimed under its endpoint's limits: its end frees what they lent. */
  limited?: boolean;
  /** Whether its endpoint was in a run of failures or its breaker's window open when claimed. */
  failing?: boolean;
  endpoint_id: string;
  url: string;
  ordered: boolean;
  /**
   * The endpoint's stored secrets as JSON text, decoded once per endpoint and batch rather than by the driver on
   * every row; the previous one only while it still signs.
   */
  secret: string;
  previous_secret: string | null;
  event_id: string;
  account_id: string;
  type: string;
  sequence: string | number;
  /** As JSON text. */
  data: string;
  /** As the body shows it (ISO 8601, milliseconds, UTC), formatted by the database. */
  created_at: string;
}

/** A claimed delivery's columns from its endpoint (`de`): the secrets as text, which no row has to parse. */
const ENDPOINT_COLUMNS = sql`de.url, de.ordered, de.secret::text as secret,
  case when de.previous_secret_until > now() then de.previous_secret::text end as previous_secret`;

/** Whether an endpoint (`de`) is in a run of failures or its breaker's window is open: its successes count then. */
const FAILING = sql`(de.failing_since is not null or de.window_started_at is not null)`;

/**
 * The event (`ev`) of a delivery's log row: by its account and sequence number, which the row
 * copies from its event when it is written (one event of an account has each number), rather
 * than by the event's id. The numbers of a batch run in order through that index and the events'
 * pages, where the ids are random: 1.0-1.6 ms for the events of 512 deliveries against 2.2-4.2 ms.
 */
const eventOf = (log: string) =>
  sql`ev.account_id = ${sql.raw(log)}.account_id and ev.sequence = ${sql.raw(log)}.sequence`;

/** A claimed delivery's columns from its event (`ev`) but its account: the timestamp already in the body's format. */
const EVENT_COLUMNS = sql`ev.id as event_id, ev.type, ev.sequence, ev.data::text as data,
  to_char(ev.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as created_at`;

/** The claimed row's columns from its endpoint (`de`) and event (`ev`), none parsed or formatted again. */
const CLAIMED_COLUMNS = sql`${ENDPOINT_COLUMNS}, ev.account_id, ${EVENT_COLUMNS}`;

/**
 * Up to `limit` due rows of webhook_due (as `c`) a claim may take, locked: due, their endpoint
 * enabled and, for an ordered endpoint, no earlier event of it due (a row another batch holds
 * still counts: its delete has not committed) or set aside (a retry or replay sets aside what
 * its head brings forward). A row whose endpoint is gone is taken too, to
 * be dropped (see webhookDue). SKIP LOCKED lets several workers claim at once without waiting
 * on each other's rows. No order: sorting would read every due row, and a backlog makes each
 * claim as slow as it is long; the scan stops at the limit. The endpoints in `full` already hold
 * their share of the claiming worker's slots and none of their attempts ends (see SlotShares):
 * their rows are left for later. An endpoint whose circuit breaker is open is passed over, but by
 * the claim of its `probe`. An endpoint with limits is passed over too, but by a claim of `only`
 * it, for as many as its limits granted (see endpoint-limits.ts): the usual claim pays two null
 * checks on the endpoint row it already reads. `range` narrows the rows to a part of the due set's heap (see
 * ScanPosition).
 */
const dueRows = (
  limit: number | SQL,
  columns: SQL,
  full: string[],
  probe?: string,
  only?: string,
  range = sql``,
) => sql`
  select ${columns} from webhook_due c left join webhook_endpoints de on de.id = c.endpoint_id
  -- A retry's timer may fire a little before the database's clock says it is due.
  where c.due_at <= now() + interval '1 second'${range}${
    full.length > 0 ? sql` and c.endpoint_id <> all(${arrayLiteral(full)}::text[])` : sql``
  }
    and (de.id is null or (de.enabled and ${
      probe !== undefined
        ? sql`c.endpoint_id = ${probe}`
        : only !== undefined
          ? sql`de.circuit_open_until is null and c.endpoint_id = ${only}`
          : sql`de.circuit_open_until is null and de.rate_per_second is null and de.max_in_flight is null`
    } and not (de.ordered and (
      exists (select 1 from webhook_due p where p.endpoint_id = c.endpoint_id and p.sequence < c.sequence)
      or exists (select 1 from webhook_parked p where p.endpoint_id = c.endpoint_id and p.sequence < c.sequence)))))
  limit ${limit}
  for update of c skip locked`;

/**
 * Delivery bookkeeping commits without waiting for the WAL flush (set for its own transaction
 * only): a database crash can forget only the last moment's attempts, and a forgotten claim
 * or success means the delivery is sent again, which at-least-once allows (receivers
 * de-duplicate by webhook-id). Events and their delivery rows are written by the feature's
 * transaction and flushed as usual.
 */
const SET_NO_FLUSH = sql`(select set_config('synchronous_commit', 'off', true))`;
const NO_FLUSH = sql`${SET_NO_FLUSH} as no_flush`;

/**
 * How long a claim holds a delivery: one attempt's timeout and a margin, half the timeout and
 * at least 3 s (5 s at the default 10 s), so a worker killed mid-attempt delays it only that
 * long. The pump sends a claimed delivery only while a whole attempt and a second for writing
 * its outcome still fit in the lease, so the margin also bounds how long a claim may wait.
 */
export const leaseMs = () => config.webhooks.timeoutMs + Math.max(3_000, config.webhooks.timeoutMs / 2);

/**
 * Takes up to `limit` due deliveries (see dueRows) for one attempt each: the due row moves past
 * the claim's lease, the log row counts the attempt and shows the lease. A due row whose
 * delivery is gone is deleted instead.
 */
export async function claimDue(
  handle: Database,
  limit: number,
  full: string[] = [],
  probe?: string,
  only?: string,
): Promise<Claimed[]> {
  const leaseSeconds = leaseMs() / 1000;
  return rowsOf<Claimed>(
    await handle.execute(
      sql`
      with picked as materialized (
        -- A scalar subquery, probed by the key for each row picked: as not exists (…) PostgreSQL hashed the
        -- whole delivery log once a claim, and as a join to picked it read the whole due set.
        ${dueRows(limit, sql`c.ctid as row, c.delivery_id, (select d.id from webhook_deliveries d where d.id = c.delivery_id) is null as gone`, full, probe, only)}
      ),
      -- By ctid: the rows are locked by the claim, so each stays where it lies.
      dropped as (delete from webhook_due w where w.ctid = any(array(select row from picked where gone))),
      claimed as (
        update webhook_due w set due_at = now() + make_interval(secs => ${leaseSeconds})
        where w.ctid = any(array(select row from picked where not gone))
        returning w.delivery_id, w.due_at
      )
      update webhook_deliveries u
      set attempts = u.attempts + 1, leased_until = c.due_at, last_attempt_at = now()
      from claimed c, webhook_endpoints de, events ev, ${NO_FLUSH}
      where u.id = c.delivery_id and de.id = u.endpoint_id and ${eventOf("u")}
      returning u.id, u.attempts, u.leased_until::text as lease, u.endpoint_id, ${FAILING} as failing, ${CLAIMED_COLUMNS}`,
    ),
  );
}

/**
 * Where a worker's claims go on from in the due set's heap: the position (ctid, as text) of the
 * last row its last claim took. A claim reads the due set in the heap's order, and from its start
 * it passed, lock by lock, over every row the worker's other open batches hold (deleted, not yet
 * committed): 1,000-2,000 rows a claim at the pump's 3-5 batches open (a pick of 512 took 2.5 ms
 * behind 2,048 rows held, 0.6 ms behind none, on a due set of 20,000). Going on after the last
 * claim passes over none; what lies before the position (a row written into space freed at the
 * heap's start, a batch's rows given back) is taken once the rest is, as a claim that finds fewer
 * than it may take after the position takes the rest from the start, and the next goes on from
 * there. So a backlog is sent about in the order it was written, where claims from the start took
 * a new row in a freed page before older ones further on.
 */
export interface ScanPosition {
  after?: string;
}

/**
 * Takes up to `limit` due deliveries (see dueRows) for the transaction `tx` by deleting their
 * due rows, and writes nothing else: until `tx` ends other workers' claims skip those rows,
 * and if it ends without committing they are due again. A row whose delivery is gone is
 * deleted and not answered. `attempts` answers the attempt about to be made, which
 * recordLocked writes. The transaction commits without waiting for the WAL flush, as a claim
 * did. Given a `position`, the claim goes on from it and moves it to where it stopped.
 */
export async function claimLocked(
  tx: Database,
  limit: number,
  full: string[] = [],
  only?: string,
  position?: ScanPosition,
): Promise<Claimed[]> {
  const after = position?.after;
  // Rows after the position, then as many more as are missing from the heap's start up to it; without a position,
  // from the start. MATERIALIZED: each part is read, and locked, once.
  const picked =
    after === undefined
      ? sql`picked as materialized (${dueRows(limit, sql`c.ctid`, full, undefined, only)})`
      : sql`onward as materialized (${dueRows(limit, sql`c.ctid`, full, undefined, only, sql` and c.ctid > ${after}::tid`)}),
        earlier as materialized (${dueRows(
          sql`${limit} - (select count(*) from onward)`,
          sql`c.ctid`,
          full,
          undefined,
          only,
          sql` and c.ctid <= ${after}::tid`,
        )}),
        picked as (select ctid from onward union all select ctid from earlier)`;
  // Where the next claim goes on from: the last row of the part read last.
  const stop =
    after === undefined
      ? sql`(select max(ctid) from picked)`
      : sql`coalesce((select max(ctid) from earlier), (select max(ctid) from onward))`;
  const rows = rowsOf<Omit<Claimed, EndpointColumn | "lease"> & { stop: string | null }>(
    await tx.execute(
      sql`
      with ${picked},
      claimed as (
        -- = any(array(…)), not in (…): PostgreSQL joins an IN subquery by hashing and reads every due
        -- row to match it (3.9 of 10.5 ms a claim of 256 with 20,000 due); an array is probed by the key.
        -- By ctid, not by key: the rows are locked by this statement, so each stays where it lies until deleted.
        delete from webhook_due w where w.ctid = any(array(select ctid from picked))
        returning w.delivery_id
      )
      select d.id, d.attempts + 1 as attempts, d.endpoint_id, ${EVENT_COLUMNS}${position ? sql`, ${stop}::text as stop` : sql``}
      from claimed c join webhook_deliveries d on d.id = c.delivery_id join events ev on ${eventOf("d")}
      -- The commit's mode, set once: a filter on no column is evaluated before the first row.
      where ${SET_NO_FLUSH} is not null`,
    ),
  );
  // No row: nothing was due after the position nor before it, and the next claim starts from the heap's start.
  if (position) position.after = rows[0]?.stop ?? undefined;
  if (rows.length === 0) return [];
  // The endpoints' columns once each, not on every row: a batch's rows mostly share a few endpoints, and their
  // columns on each row were a quarter of PostgreSQL's time on the claim (2.3-2.7 → 1.7-1.8 ms a claim of 256)
  // and half the columns the driver reads.
  const endpoints = new Map(
    rowsOf<Pick<Claimed, EndpointColumn | "endpoint_id">>(
      await tx.execute(sql`
        select de.id as endpoint_id, de.account_id, ${FAILING} as failing, ${ENDPOINT_COLUMNS}
        from webhook_endpoints de where de.id = any(${arrayLiteral([...new Set(rows.map((row) => row.endpoint_id))])}::text[])`),
    ).map((endpoint) => [endpoint.endpoint_id, endpoint]),
  );
  const claimed: Claimed[] = [];
  for (const row of rows) {
    const endpoint = endpoints.get(row.endpoint_id);
    // Deleted since the claim (its deliveries with it): nothing to send, and its due row is gone with the claim.
    if (endpoint) claimed.push({ ...row, ...endpoint, lease: "" });
  }
  return claimed;
}

/**
 * Gives back claimed deliveries that were not sent (the worker is stopping,
 * or they waited too long): due again at once, the attempt not counted.
 */
export async function releaseClaims(rows: Claimed[]): Promise<void> {
  if (rows.length === 0) return;
  await db.execute(sql`
    with released as (
      update webhook_due w set due_at = now()
      from jsonb_to_recordset(${JSON.stringify(rows.map((row) => ({ id: Number(row.id), lease: row.lease })))}::jsonb) as o(id bigint, lease timestamptz)
      -- Only while the lease is still this claim's: once it ended, another worker may hold the delivery.
      where w.delivery_id = o.id and w.due_at = o.lease
      returning w.delivery_id
    )
    update webhook_deliveries d set leased_until = null, attempts = d.attempts - 1
    from released r, ${NO_FLUSH} where d.id = r.delivery_id`);
}

/**
 * The body exactly as signed: the event's catalogue shape, its data as the database writes it out, neither parsed
 * nor written again here (that took some 8 µs of the worker's CPU a delivery).
 */
function bodyOf(row: Claimed): string {
  return (
    `{"id":${JSON.stringify(row.event_id)},"type":${JSON.stringify(row.type)},` +
    `"account_id":${JSON.stringify(row.account_id)},"created_at":"${row.created_at}",` +
    `"sequence":${Number(row.sequence)},"data":${row.data}}`
  );
}

export interface Outcome {
  statusCode: number | null;
  response: string;
  latencyMs: number;
}

/**
 * Where an attempt connects: the address just checked, so a second lookup cannot hand out another one, under the
 * URL's names (the Host header; on https the name the certificate must hold).
 */
function destinationOf(target: WebhookTarget): Destination {
  const { url } = target;
  const tls = url.protocol === "https:";
  return {
    address: target.address,
    port: url.port ? Number(url.port) : tls ? 443 : 80,
    tls,
    serverName: url.hostname.replace(/^\[|\]$/g, ""),
    host: url.host,
    target: `${url.pathname}${url.search}`,
  };
}

/**
 * What the deliveries claimed together share: each URL is checked (and its name resolved)
 * once, each endpoint's secrets opened once and each event's body built once (an event goes
 * to every endpoint subscribed) for all of them, which all start at once.
 */
export class ClaimedBatch {
  private readonly destinations = new Map<string, Promise<Destination>>();
  private readonly keys = new Map<string, Buffer[]>();
  private readonly bodies = new Map<string, string>();

  destination(url: string): Promise<Destination> {
    let destination = this.destinations.get(url);
    if (!destination) {
      destination = checkWebhookUrl(url).then(destinationOf);
      this.destinations.set(url, destination);
    }
    return destination;
  }

  signingKeys(row: Claimed): Buffer[] {
    let keys = this.keys.get(row.endpoint_id);
    if (!keys) {
      keys = [signingKey(openSecret(JSON.parse(row.secret) as StoredPrivateKey))];
      if (row.previous_secret) keys.push(signingKey(openSecret(JSON.parse(row.previous_secret) as StoredPrivateKey)));
      this.keys.set(row.endpoint_id, keys);
    }
    return keys;
  }

  body(row: Claimed): string {
    let body = this.bodies.get(row.event_id);
    if (body === undefined) {
      body = bodyOf(row);
      this.bodies.set(row.event_id, body);
    }
    return body;
  }
}

/** One attempt of a claimed delivery; never throws: a failure is an outcome with no status code. */
export async function send(row: Claimed, batch: ClaimedBatch): Promise<Outcome> {
  const started = performance.now();
  try {
    const body = batch.body(row);
    const timestamp = Math.floor(Date.now() / 1000);
    const keys = batch.signingKeys(row);
    let signature = sign(keys[0]!, row.event_id, timestamp, body);
    for (let i = 1; i < keys.length; i++) signature += ` ${sign(keys[i]!, row.event_id, timestamp, body)}`;
    // Checked again at each attempt: the name may have been rebound to an internal address.
    const destination = await batch.destination(row.url);
    const headers = {
      "content-type": "application/json",
      "user-agent": "Parley-Webhooks/1",
      "webhook-id": row.event_id,
      "webhook-timestamp": String(timestamp),
      "webhook-signature": signature,
    };
    const { timeoutMs, connectTimeoutMs } = config.webhooks;
    const answer = await post(destination, headers, body, timeoutMs, RESPONSE_BYTES, connectTimeoutMs);
    return {
      statusCode: answer.status,
      // PostgreSQL's text holds no NUL: one in a receiver's answer would fail the whole batch's record.
      response: answer.body.replaceAll("\0", "\uFFFD"),
      latencyMs: Math.round(performance.now() - started),
    };
  } catch (error) {
    const message =
      error instanceof AppError
        ? `refused: ${error.message}`
        : (error as Error).name === "TimeoutError"
          ? `no answer within ${config.webhooks.timeoutMs} ms`
          : (error as Error).message;
    return {
      statusCode: null,
      response: message.slice(0, RESPONSE_BYTES),
      latencyMs: Math.round(performance.now() - started),
    };
  }
}

/** A failed attempt's next one: in how many seconds, or none left. */
const retryWait = (row: Claimed) => config.webhooks.retrySchedule[row.attempts - 1];

/**
 * An endpoint's columns after a failed attempt: its failure run goes on, and it is disabled
 * when the receiver is `gone` (410) or every attempt failed for WEBHOOK_DISABLE_AFTER_SECONDS.
 */
const failingEndpoint = (gone: SQL) => {
  const disableAfter = sql`make_interval(secs => ${config.webhooks.disableAfterSeconds})`;
  return sql`
    failing_since = coalesce(failing_since, now()),
    enabled = enabled and not ${gone} and coalesce(failing_since, now()) > now() - ${disableAfter},
    disabled_reason = case
      when not enabled then disabled_reason
      when ${gone} then 'the receiver answered 410 Gone'
      when coalesce(failing_since, now()) <= now() - ${disableAfter}
        then 'every attempt failed since ' || to_char(failing_since at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
      else disabled_reason end,
    updated_at = now()`;
};

/**
 * The due rows of `ids` (a SQL array of bigint) that no other transaction holds, locked: an
 * attempt whose claim ended may have been taken by another worker, whose outcome then counts.
 */
const ownDueRows = (ids: SQL) =>
  sql`select delivery_id from webhook_due where delivery_id = any(${ids}) for update skip locked`;

/**
 * Records a failed attempt and when to try next (the due row moves to it, or goes when no
 * attempt is left), and disables an endpoint that is gone or has failed too long.
 */
export async function recordFailure(row: Claimed, outcome: Outcome): Promise<{ retryInMs?: number }> {
  const waitSeconds = retryWait(row);
  const status = waitSeconds === undefined ? "failed" : "pending";
  const gone = outcome.statusCode === 410;
  const own = ownDueRows(sql`array[${Number(row.id)}::bigint]`);
  // One statement: the outcome, the retry and the endpoint's state commit together.
  const [endpoint] = rowsOf<{ enabled: boolean; was_enabled: boolean; disabled_reason: string | null; url: string }>(
    await db.execute(sql`
      with before as (select enabled from webhook_endpoints where id = ${row.endpoint_id}),
      due as (
        ${
          status === "pending"
            ? sql`update webhook_due set due_at = now() + make_interval(secs => ${waitSeconds}) where delivery_id = any(array(${own}))`
            : sql`delete from webhook_due where delivery_id = any(array(${own}))`
        }
        returning delivery_id
      ),
      delivery as (
        update webhook_deliveries set status = ${status}, leased_until = null,
          next_attempt_at = ${status === "pending" ? sql`now() + make_interval(secs => ${waitSeconds})` : sql`next_attempt_at`},
          last_status_code = ${outcome.statusCode}, last_latency_ms = ${outcome.latencyMs}, last_response = ${outcome.response}
        where id in (select delivery_id from due)
      ),
      endpoint as (
        update webhook_endpoints set ${failingEndpoint(sql`${gone}`)}
        where id = ${row.endpoint_id}
        returning enabled, disabled_reason, url
      )
      select endpoint.*, before.enabled as was_enabled from ${NO_FLUSH} left join endpoint on true left join before on true`),
  );
  if (endpoint && !endpoint.enabled) {
    await parkDue(db, [row.endpoint_id]);
    if (endpoint.was_enabled)
      await endpointEvent(
        { id: row.endpoint_id, account_id: row.account_id, url: endpoint.url },
        "endpoint.disabled",
        endpoint.disabled_reason ?? "",
      );
  } else if (status === "failed") await promoteNext([row]);
  if (endpoint) await countOutcomes([{ id: row.endpoint_id, attempts: 1, failures: 1 }]);
  return status === "pending" && endpoint?.enabled ? { retryInMs: waitSeconds! * 1000 } : {};
}

/**
 * Brings forward the next delivery of each ordered endpoint among `rows`, which are done (or
 * retried: an endpoint whose head is due again brings nothing forward). No round trip when none
 * is ordered.
 */
export function promoteNext(rows: Claimed[]): Promise<void> {
  return promoteHeads(db, [...new Set(rows.filter((row) => row.ordered).map((row) => row.endpoint_id))]);
}

export const isSuccess = (outcome: Outcome) =>
  outcome.statusCode !== null && outcome.statusCode >= 200 && outcome.statusCode < 300;

/**
 * Records the successes of a batch in one statement (their due rows go), and clears their
 * endpoints' failure runs.
 */
export async function recordSuccesses(sent: Array<{ row: Claimed; outcome: Outcome }>): Promise<void> {
  if (sent.length === 0) return;
  const outcomes = sent.map(({ row, outcome }) => ({
    id: Number(row.id),
    code: outcome.statusCode,
    latency: outcome.latencyMs,
    response: outcome.response,
  }));
  const endpoints = [...new Set(sent.map(({ row }) => row.endpoint_id))];
  await db.execute(
    sql`
    with outcome as (
      select * from jsonb_to_recordset(${JSON.stringify(outcomes)}::jsonb) as o(id bigint, code integer, latency integer, response text)
    ),
    done as (
      delete from webhook_due where delivery_id = any(array(${ownDueRows(sql`array(select id from outcome)`)}))
      returning delivery_id
    ),
    delivered as (
      update webhook_deliveries d set status = 'succeeded', leased_until = null,
        last_status_code = o.code, last_latency_ms = o.latency, last_response = o.response
      from outcome o join done on done.delivery_id = o.id where d.id = o.id
    ),
    healthy as (
      update webhook_endpoints set failing_since = null
      where id in (select jsonb_array_elements_text(${JSON.stringify(endpoints)}::jsonb)) and failing_since is not null
    )
    select 1 from ${NO_FLUSH}`,
  );
  await promoteNext(sent.map(({ row }) => row));
  await countOutcomes(countsOf(sent.map(({ row }) => ({ ...row, failed: false }))));
}

/**
 * The log rows (`d`) of a batch's `outcomes` (a table of them, with their `id`), found by their
 * keys. Joined to the outcomes alone, a batch of 512 was planned as a hash join that read every
 * row of the log, at each batch, while the log was short enough for its scan to look cheaper than
 * 512 probes (at 20,000 rows it was): 8.6-15.6 ms a record in isolation, against 2.3-3.9 probed.
 */
const probed = (outcomes: string) => sql`d.id = any(array(select id from ${sql.raw(outcomes)}))`;

/** An attempt made under a claim held by row locks: its outcome, and when it started (Date.now()). */
export interface Attempted {
  row: Claimed;
  outcome: Outcome;
  at: number;
}

/**
 * Records a batch claimed by claimLocked, inside its transaction and in one statement: each
 * finished attempt's outcome in its log row (a failure also due again at its next attempt,
 * or failed when none is left) and a lease on each attempt still in flight (`unfinished`),
 * due again when it ends, so that once the transaction commits another worker waits out the
 * attempt as it would a claimDue claim; its outcome is recorded later by recordSuccesses or
 * recordFailure. The claimed deliveries it did not begin (`unbegun`) are due again at once,
 * their log rows untouched. A success writes only its log row, and changes no indexed column
 * there. The endpoints' state is left to recordEndpoints, after the commit.
 */
export async function recordLocked(
  tx: Database,
  finished: Attempted[],
  unfinished: Array<{ row: Claimed; at: number }>,
  unbegun: Claimed[] = [],
): Promise<void> {
  const column = <T>(rows: T[], value: (row: T) => string | number | null) => arrayLiteral(rows.map(value));
  // at: milliseconds since the epoch, which the worker need not format.
  const attempted = sql`${column(finished, ({ row }) => Number(row.id))}::bigint[],
    ${column(finished, ({ row }) => row.attempts)}::integer[], ${column(finished, ({ at }) => at)}::double precision[],
    ${column(finished, ({ outcome }) => outcome.statusCode)}::integer[],
    ${column(finished, ({ outcome }) => outcome.latencyMs)}::integer[],
    ${column(finished, ({ outcome }) => outcome.response)}::text[]`;
  if (unfinished.length === 0 && unbegun.length === 0 && finished.every(({ outcome }) => isSuccess(outcome))) {
    // The usual batch, every attempt a success: its log rows alone change, by a statement quick to plan.
    await tx.execute(sql`
      with o as (select * from unnest(${attempted}) as o(id, attempts, at, code, latency, response))
      update webhook_deliveries d set status = 'succeeded', attempts = o.attempts, last_attempt_at = to_timestamp(o.at / 1000),
        leased_until = null, last_status_code = o.code, last_latency_ms = o.latency, last_response = o.response
      from o where ${probed("o")} and d.id = o.id`);
    return;
  }
  const failed = ({ outcome }: Attempted) => !isSuccess(outcome);
  await tx.execute(
    sql`
      with outcome as (
        select o.*, statement_timestamp() + make_interval(secs => o.wait) as next
        from unnest(${attempted},
          ${column(finished, (attempt) => (failed(attempt) ? (retryWait(attempt.row) === undefined ? "failed" : "pending") : "succeeded"))}::text[],
          ${column(finished, (attempt) => (failed(attempt) ? (retryWait(attempt.row) ?? null) : null))}::double precision[],
          ${column(finished, ({ row }) => row.endpoint_id)}::text[], ${column(finished, ({ row }) => Number(row.sequence))}::bigint[])
          as o(id, attempts, at, code, latency, response, status, wait, endpoint, sequence)
      ),
      lease as (
        select o.*, statement_timestamp() + make_interval(secs => ${leaseMs() / 1000}) as until
        from unnest(${column(unfinished, ({ row }) => Number(row.id))}::bigint[],
          ${column(unfinished, ({ row }) => row.attempts)}::integer[], ${column(unfinished, ({ at }) => at)}::double precision[],
          ${column(unfinished, ({ row }) => row.endpoint_id)}::text[], ${column(unfinished, ({ row }) => Number(row.sequence))}::bigint[])
          as o(id, attempts, at, endpoint, sequence)
      ),
      delivered as (
        update webhook_deliveries d set status = o.status, attempts = o.attempts, last_attempt_at = to_timestamp(o.at / 1000), leased_until = null,
          next_attempt_at = coalesce(o.next, d.next_attempt_at),
          last_status_code = o.code, last_latency_ms = o.latency, last_response = o.response
        from outcome o where ${probed("outcome")} and d.id = o.id
      ),
      leased as (
        update webhook_deliveries d set attempts = o.attempts, last_attempt_at = to_timestamp(o.at / 1000), leased_until = o.until
        from lease o where ${probed("lease")} and d.id = o.id
      ),
      due as (
        insert into webhook_due (delivery_id, endpoint_id, sequence, due_at)
        select * from (
          select id, endpoint, sequence, next from outcome where next is not null
          union all
          select id, endpoint, sequence, until from lease
          union all
          select o.id, o.endpoint, o.sequence, statement_timestamp()
          from unnest(${column(unbegun, (row) => Number(row.id))}::bigint[], ${column(unbegun, (row) => row.endpoint_id)}::text[],
            ${column(unbegun, (row) => Number(row.sequence))}::bigint[]) as o(id, endpoint, sequence)
        ) as again (id, endpoint, sequence, at)
        -- Not for a delivery gone meanwhile with its endpoint: nothing would send it, and the row would
        -- wait for some claim to drop it.
        where exists (select from webhook_deliveries d where d.id = again.id)
        -- A retry or replay made meanwhile added the row back, due now.
        on conflict (delivery_id) do update set due_at = least(webhook_due.due_at, excluded.due_at)
      )
      select 1`,
  );
}

/**
 * The endpoints' state after a batch recorded by recordLocked committed: an endpoint whose
 * last outcome in the batch failed goes on with its failure run (and may be disabled), one
 * whose last outcome succeeded ends it. Outside the batch's transaction: deleting an
 * endpoint locks its row and then waits for its deliveries' rows, so the transaction holding
 * those must not wait for the endpoint's. Nothing to do, and no round trip, when every
 * attempt succeeded at endpoints that were not failing. Answers the endpoints it disabled (what
 * of them is due set aside by parkDue), and in how many milliseconds each retry the batch
 * scheduled for an endpoint that stays enabled comes due.
 */
export async function recordEndpoints(
  finished: Attempted[],
): Promise<{ disabled: Array<{ id: string; disabled_reason: string | null }>; retryInMs: number[] }> {
  // Finished in order, so the last outcome of an endpoint decides whether its failure run goes on.
  const endpoints = new Map<string, { id: string; failed: boolean; gone: boolean }>();
  let changes = false;
  for (const { row, outcome } of finished) {
    const before = endpoints.get(row.endpoint_id);
    const failed = !isSuccess(outcome);
    changes ||= failed || row.failing === true;
    endpoints.set(row.endpoint_id, {
      id: row.endpoint_id,
      failed,
      gone: (before?.gone ?? false) || outcome.statusCode === 410,
    });
  }
  if (!changes) return { disabled: [], retryInMs: [] };
  type Endpoint = { id: string; account_id: string; url: string; enabled: boolean; was_enabled: boolean };
  const disabled = rowsOf<Endpoint & { disabled_reason: string | null }>(
    await db.execute(sql`
      with outcome as (
        select * from jsonb_to_recordset(${JSON.stringify([...endpoints.values()])}::jsonb) as e(id text, failed boolean, gone boolean)
      ),
      before as (select id, enabled from webhook_endpoints where id in (select id from outcome)),
      healthy as (
        update webhook_endpoints w set failing_since = null
        from outcome e where w.id = e.id and not e.failed and w.failing_since is not null
      )
      update webhook_endpoints w set ${failingEndpoint(sql`e.gone`)}
      from outcome e where w.id = e.id and e.failed
      returning w.id, w.account_id, w.url, w.enabled, w.disabled_reason,
        (select b.enabled from before b where b.id = w.id) as was_enabled`),
  ).filter((endpoint) => !endpoint.enabled);
  const off = new Set(disabled.map((endpoint) => endpoint.id));
  await parkDue(db, [...off]);
  for (const endpoint of disabled)
    if (endpoint.was_enabled) await endpointEvent(endpoint, "endpoint.disabled", endpoint.disabled_reason ?? "");
  await countOutcomes(countsOf(finished.map(({ row, outcome }) => ({ ...row, failed: !isSuccess(outcome) }))));
  return {
    disabled,
    retryInMs: finished
      .filter(({ row, outcome }) => !isSuccess(outcome) && retryWait(row) !== undefined && !off.has(row.endpoint_id))
      .map(({ row }) => retryWait(row)! * 1000),
  };
}
