/**
 * The probe of an endpoint whose circuit breaker's cool-down is over (see circuit.ts): run by
 * the webhooks workers' sweep. Taking the probe moves the breaker's time a lease on, in one
 * statement, so of several workers one probes. One due delivery is claimed under a lease and
 * sent: a success closes the breaker (and the sweep's wake-up sends what waited), a failure
 * opens it again for a cool-down. The probe is an attempt like any other, recorded as one. An
 * endpoint with nothing due is left to be probed by a later sweep.
 */
import { sql } from "drizzle-orm";
import { config } from "../../core/config";
import { db } from "../../db/client";
import { rowsOf } from "../../db/rows";
import { endpointEvent } from "./circuit";
import { ClaimedBatch, claimDue, isSuccess, leaseMs, recordFailure, recordSuccesses, send } from "./delivery";

/** Probes every endpoint whose breaker's cool-down is over; answers how many closed. */
export async function probeOpenCircuits(): Promise<number> {
  const endpoints = rowsOf<{ id: string }>(
    await db.execute(sql`
      update webhook_endpoints set circuit_open_until = now() + make_interval(secs => ${leaseMs() / 1000})
      where circuit_open_until <= now() and enabled returning id`),
  );
  const closed = await Promise.all(endpoints.map(({ id }) => probe(id)));
  return closed.filter(Boolean).length;
}

async function probe(endpointId: string): Promise<boolean> {
  const [row] = await claimDue(db, 1, [], endpointId);
  if (!row) {
    // Nothing due to probe with: the next sweep looks again.
    await db.execute(sql`update webhook_endpoints set circuit_open_until = now() where id = ${endpointId}`);
    return false;
  }
  const outcome = await send(row, new ClaimedBatch());
  const endpoint = { id: endpointId, account_id: row.account_id, url: row.url };
  if (isSuccess(outcome)) {
    await recordSuccesses([{ row, outcome }]);
    await db.execute(sql`
      update webhook_endpoints set circuit_open_until = null, window_started_at = null, window_attempts = 0,
        window_failures = 0
      where id = ${endpointId}`);
    await endpointEvent(endpoint, "endpoint.circuit_closed", `the probe succeeded (${outcome.statusCode})`);
    return true;
  }
  await recordFailure(row, outcome);
  const [reopened] = rowsOf<{ id: string }>(
    await db.execute(sql`
      update webhook_endpoints
      set circuit_open_until = now() + make_interval(secs => ${config.webhooks.breakerCooldownSeconds})
      where id = ${endpointId} and enabled returning id`),
  );
  if (reopened)
    await endpointEvent(
      endpoint,
      "endpoint.circuit_opened",
      `the probe failed: ${outcome.statusCode ?? outcome.response}`.slice(0, 300),
    );
  return false;
}
