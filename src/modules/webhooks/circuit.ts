/**
 * Each endpoint's circuit breaker, kept in its row (the database is the truth, whichever
 * worker sent the attempts). A window opens at a failed attempt and counts the attempts and
 * failures for WEBHOOK_BREAKER_WINDOW_SECONDS; once it holds WEBHOOK_BREAKER_MIN_ATTEMPTS of
 * which WEBHOOK_BREAKER_FAILURE_PERCENT failed, the breaker opens for
 * WEBHOOK_BREAKER_COOLDOWN_SECONDS: no claim takes the endpoint's deliveries, which wait with
 * no attempt counted. Then a sweep sends one of them as the probe (probe.ts): its success
 * closes the breaker, its failure opens it again. Each change, and an endpoint Parley
 * disables, is a catalogue event with the reason, for the account's other endpoints, the
 * event log and the stream.
 */
import { sql } from "drizzle-orm";
import { config } from "../../core/config";
import { db } from "../../db/client";
import { log } from "../../core/log";
import { rowsOf } from "../../db/rows";
import { recordEvent } from "../catalogue";

/** An endpoint's attempts in one record, and how many of them failed. */
export interface Counted {
  id: string;
  attempts: number;
  failures: number;
}

type EndpointEvent = "endpoint.circuit_opened" | "endpoint.circuit_closed" | "endpoint.disabled";

/** Records an endpoint's breaker or state change as a catalogue event; logged, not thrown, when that fails. */
export async function endpointEvent(
  endpoint: { id: string; account_id: string; url: string },
  type: EndpointEvent,
  reason: string,
): Promise<void> {
  log.warn({ endpointId: endpoint.id, reason }, type);
  try {
    await db.transaction((tx) =>
      recordEvent(tx, endpoint.account_id, type, { endpoint_id: endpoint.id, url: endpoint.url, reason }),
    );
  } catch (error) {
    log.warn({ endpointId: endpoint.id, err: (error as Error).message }, `recording ${type} failed`);
  }
}

/**
 * Counts attempts into their endpoints' windows (only a failure opens one) and opens the breakers whose window now
 * fails too often, on a failure only: successes after a run of failures lower the ratio, and never open it.
 */
export async function countOutcomes(counts: Counted[]): Promise<void> {
  if (counts.length === 0) return;
  const { breakerWindowSeconds, breakerMinAttempts, breakerFailurePercent, breakerCooldownSeconds } = config.webhooks;
  type Judged = { id: string; account_id: string; url: string; opens: boolean; attempts: number; failures: number };
  const opened = rowsOf<Judged>(
    await db.execute(sql`
      with o as (
        select * from jsonb_to_recordset(${JSON.stringify(counts)}::jsonb) as o(id text, attempts integer, failures integer)
      ),
      counted as (
        select w.id, o.failures,
          case when x.fresh then w.window_started_at when o.failures > 0 then now() end as since,
          case when x.fresh then w.window_attempts else 0 end + o.attempts as attempts,
          case when x.fresh then w.window_failures else 0 end + o.failures as failures_now,
          -- A disabled endpoint's breaker stays as it is: nothing is sent to it, and enabling it closes the breaker.
          w.circuit_open_until is null and w.enabled as closed
        from webhook_endpoints w join o on o.id = w.id,
          lateral (select coalesce(w.window_started_at > now() - make_interval(secs => ${breakerWindowSeconds}), false)
            as fresh) x
      ),
      judged as (
        select c.*, c.closed and c.failures > 0 and c.since is not null and c.attempts >= ${breakerMinAttempts}
          and c.failures_now * 100 >= ${breakerFailurePercent} * c.attempts as opens
        from counted c
      )
      update webhook_endpoints w set
        window_started_at = case when j.opens then null else j.since end,
        window_attempts = case when j.opens or j.since is null then 0 else j.attempts end,
        window_failures = case when j.opens or j.since is null then 0 else j.failures_now end,
        circuit_open_until = case when j.opens then now() + make_interval(secs => ${breakerCooldownSeconds})
          else w.circuit_open_until end
      from judged j where w.id = j.id and (j.since is not null or w.window_started_at is not null)
      returning w.id, w.account_id, w.url, j.opens, j.attempts, j.failures_now as failures`),
  ).filter((row) => row.opens);
  for (const endpoint of opened)
    await endpointEvent(
      endpoint,
      "endpoint.circuit_opened",
      `${endpoint.failures} of ${endpoint.attempts} attempts failed within ${breakerWindowSeconds} s`,
    );
}

/** The attempts of `rows` by endpoint, for countOutcomes: of the endpoints with a failure or a window open only. */
export function countsOf(rows: Array<{ endpoint_id: string; failing?: boolean; failed: boolean }>): Counted[] {
  const counts = new Map<string, Counted & { counts: boolean }>();
  for (const row of rows) {
    let count = counts.get(row.endpoint_id);
    if (!count) {
      count = { id: row.endpoint_id, attempts: 0, failures: 0, counts: false };
      counts.set(row.endpoint_id, count);
    }
    count.attempts++;
    if (row.failed) count.failures++;
    count.counts ||= row.failed || row.failing === true;
  }
  return [...counts.values()]
    .filter((count) => count.counts)
    .map(({ id, attempts, failures }) => ({ id, attempts, failures }));
}
