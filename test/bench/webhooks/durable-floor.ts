/**
 * The webhooks worker's floors, for test/bench/webhooks.bench.ts: the least that any worker on
 * PostgreSQL must do to deliver at least once and keep a log, written out plainly. A batch is one
 * transaction: its due rows deleted (FOR UPDATE SKIP LOCKED, so two batches never take one row)
 * and their events read in one statement, each delivery signed and POSTed by the worker's own
 * send (Parley's HTTP client, the same body and headers), the outcomes written, the commit made
 * without waiting for the WAL flush. Two batches run at once, one claiming while the other sends,
 * with `inFlight` attempts at most between them, as many as the bare loop and the worker have.
 *
 * No endpoint state, limits, ordering, breaker, retries or leases: what the worker costs beyond
 * the floor is what those and its pump add. Two ways to write the outcomes:
 * - `rows`: each success in its log row, as the worker writes it (one row update a delivery);
 * - `batch`: one row a batch for all its successes, the log rows left as they were, with a GIN
 *   index on its delivery ids so that a delivery's outcome can still be found (fewer row writes,
 *   at the price of a log that every reader would read through).
 */
import { sql } from "drizzle-orm";
import { db } from "../../../src/db/client";
import { arrayLiteral, rowsOf } from "../../../src/db/rows";
import { type Claimed, ClaimedBatch, send } from "../../../src/modules/webhooks/delivery";
import { BATCH_PER_SLOT } from "../../../src/modules/webhooks/locked-pump";

/** Creates the table the `batch` floor writes its outcomes to. */
export async function prepareFloor(): Promise<void> {
  await db.execute(sql`create table bench_floor_outcomes (
    id bigserial primary key, ids bigint[] not null, codes integer[] not null, latencies integer[] not null,
    responses text[] not null, at timestamptz not null default now())`);
  // fastupdate off: the index's cost is paid by each insert, not deferred past the timed run.
  await db.execute(sql`create index on bench_floor_outcomes using gin (ids) with (fastupdate = off)`);
}

/** A counting semaphore: `inFlight` attempts at most across the batches. */
function slots(inFlight: number) {
  let busy = 0;
  const waiting: Array<() => void> = [];
  return {
    async take() {
      while (busy >= inFlight) await new Promise<void>((resolve) => waiting.push(resolve));
      busy++;
    },
    give() {
      busy--;
      waiting.shift()?.();
    },
  };
}

/**
 * Sends every due delivery of the account's one endpoint the floor's way (see above) and answers
 * how many it sent. The endpoint's columns are read once, as a batch of the worker reads them.
 */
export async function runFloor(accountId: string, inFlight: number, outcomes: "rows" | "batch"): Promise<number> {
  const [endpoint] = rowsOf<Pick<Claimed, "endpoint_id" | "url" | "secret">>(
    await db.execute(sql`select id as endpoint_id, url, secret::text as secret from webhook_endpoints
      where account_id = ${accountId}`),
  );
  // A batch as large as the worker's.
  const size = inFlight * BATCH_PER_SLOT;
  const attempts = slots(inFlight);
  let sent = 0;
  let more = true;
  const batches = async () => {
    while (more)
      await db.transaction(async (tx) => {
        const rows = rowsOf<Pick<Claimed, "event_id" | "type" | "sequence" | "data" | "created_at"> & { id: string }>(
          await tx.execute(sql`
            with claimed as (
              delete from webhook_due w where w.ctid = any(array(
                select c.ctid from webhook_due c where c.due_at <= now() limit ${size} for update skip locked))
              returning w.delivery_id, w.sequence
            )
            select c.delivery_id as id, ev.id as event_id, ev.type, ev.sequence, ev.data::text as data,
              to_char(ev.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as created_at
            from claimed c join events ev on ev.account_id = ${accountId} and ev.sequence = c.sequence
            where (select set_config('synchronous_commit', 'off', true)) is not null`),
        );
        if (rows.length < size) more = false;
        if (rows.length === 0) return;
        const shared = new ClaimedBatch();
        const codes: Array<number | null> = [];
        const latencies: number[] = [];
        const responses: string[] = [];
        let next = 0;
        await Promise.all(
          Array.from({ length: Math.min(inFlight, rows.length) }, async () => {
            for (;;) {
              await attempts.take();
              const i = next++;
              if (i >= rows.length) return attempts.give();
              const row = rows[i]!;
              const outcome = await send(
                {
                  ...row,
                  ...endpoint!,
                  account_id: accountId,
                  attempts: 1,
                  lease: "",
                  ordered: false,
                  previous_secret: null,
                },
                shared,
              );
              attempts.give();
              codes[i] = outcome.statusCode;
              latencies[i] = outcome.latencyMs;
              responses[i] = outcome.response;
            }
          }),
        );
        const ids = arrayLiteral(rows.map((row) => Number(row.id)));
        if (outcomes === "rows")
          await tx.execute(sql`
            with o as (select * from unnest(${ids}::bigint[], ${arrayLiteral(codes)}::integer[],
              ${arrayLiteral(latencies)}::integer[], ${arrayLiteral(responses)}::text[]) as o(id, code, latency, response))
            update webhook_deliveries d set status = 'succeeded', attempts = d.attempts + 1, last_attempt_at = now(),
              leased_until = null, last_status_code = o.code, last_latency_ms = o.latency, last_response = o.response
            from o where d.id = any(array(select id from o)) and d.id = o.id`);
        else
          await tx.execute(sql`insert into bench_floor_outcomes (ids, codes, latencies, responses)
            values (${ids}::bigint[], ${arrayLiteral(codes)}::integer[], ${arrayLiteral(latencies)}::integer[],
              ${arrayLiteral(responses)}::text[])`);
        sent += rows.length;
      });
  };
  await Promise.all([batches(), batches()]);
  return sent;
}
