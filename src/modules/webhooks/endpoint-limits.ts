/**
 * Per-endpoint rate (a token bucket) and concurrency (max_in_flight), held across every worker and node by the
 * database: before a claim takes a limited endpoint's deliveries, a short transaction locks its row, refills and
 * takes its tokens and leases free places in webhook_slots, as many as are due and allowed. The claim then takes
 * that many of its due rows at most and gives back what it did not use; an attempt's end frees its place. A
 * delivery held back is simply not claimed: it stays due, uses up no attempt and keeps its schedule.
 *
 * Chosen over the limits module's leased budgets, which a node leases in advance and may not use: a grant here is
 * taken for rows about to be claimed, so two nodes never overshoot the rate by what either holds unused, and the
 * row lock orders every node's grants exactly. It costs a transaction per claim, only while some endpoint has a
 * limit: the usual claim leaves limited endpoints out by two null checks on the endpoint it already joins.
 */
import { sql } from "drizzle-orm";
import { db, outsideTransaction } from "../../db/client";
import { log } from "../../core/log";
import { arrayLiteral, rowsOf } from "../../db/rows";
import { type Claimed, leaseMs } from "./delivery";

/** How often a worker looks again whether any endpoint has limits: a limit set elsewhere takes effect that late. */
const LOOK_MS = 1_000;
/** How soon a worker whose claim was held back by places other workers hold looks again. */
const SLOT_POLL_MS = 50;

/** Deliveries a claim may take of a limited endpoint, and the places leased for them. */
export interface Grant {
  endpoint: string;
  count: number;
  /** Leased places, one a delivery; none for an endpoint limited by rate alone. */
  slots: number[];
  rated: boolean;
}

export class EndpointLimits {
  private limited = false;
  private lookedAt = Number.NEGATIVE_INFINITY;
  private timer: ReturnType<typeof setTimeout> | undefined;

  /** `wake`: makes the pump claim again, once held back deliveries may go. */
  constructor(private readonly wake: () => void) {}

  /** Whether any endpoint has limits, looked up at most every LOOK_MS. */
  private async anyLimited(): Promise<boolean> {
    if (performance.now() - this.lookedAt < LOOK_MS) return this.limited;
    this.lookedAt = performance.now();
    const [row] = rowsOf<{ limited: boolean }>(
      await db.execute(sql`select exists (select from webhook_endpoints
        where rate_per_second is not null or max_in_flight is not null) as limited`),
    );
    this.limited = row!.limited;
    return this.limited;
  }

  /**
   * Grants for the limited endpoints with deliveries due, but `full`'s (stalled at their share of this worker's
   * slots), up to `cap` each. An endpoint another worker is granting for at this moment is passed over: that
   * worker takes its turn.
   */
  async reserve(cap: number, full: string[]): Promise<Grant[]> {
    if (!(await this.anyLimited())) return [];
    const holdSeconds = (leaseMs() + 2_000) / 1000;
    const { grants, waitMs } = await db.transaction(async (tx) => {
      type Limited = { id: string; rate: number | null; concurrent: boolean; tokens: number; due: number };
      const endpoints = rowsOf<Limited>(
        await tx.execute(sql`
          select de.id, de.rate_per_second as rate, de.max_in_flight is not null as concurrent,
            least(coalesce(de.rate_burst, ceil(de.rate_per_second)), coalesce(de.rate_tokens, 1e9)
              + de.rate_per_second * greatest(0, extract(epoch from now() - de.rate_refilled_at))) as tokens,
            (select count(*) from (select from webhook_due c where c.endpoint_id = de.id
              and c.due_at <= now() + interval '1 second' limit ${cap}) d)::integer as due
          from webhook_endpoints de
          where (de.rate_per_second is not null or de.max_in_flight is not null)
            and de.enabled and de.circuit_open_until is null and de.id <> all(${arrayLiteral(full)}::text[])
            and exists (select from webhook_due c where c.endpoint_id = de.id and c.due_at <= now() + interval '1 second')
          for update of de skip locked`),
      );
      if (endpoints.length === 0) return { grants: [], waitMs: undefined };
      const wanted = endpoints.map((e) => ({
        ...e,
        want: e.rate === null ? e.due : Math.min(e.due, Math.floor(e.tokens)),
      }));
      // The free places of each endpoint with max_in_flight, as many as wanted, leased until the attempt ends.
      const slots = rowsOf<{ endpoint_id: string; slot: number }>(
        await tx.execute(sql`
          update webhook_slots s set held_until = now() + make_interval(secs => ${holdSeconds})
          from (
            select f.endpoint_id, f.slot from (
              select endpoint_id, slot, row_number() over (partition by endpoint_id order by slot) as n
              from webhook_slots where endpoint_id = any(${arrayLiteral(wanted.map((e) => e.id))}::text[]) and held_until < now()
            ) f join unnest(${arrayLiteral(wanted.map((e) => e.id))}::text[], ${arrayLiteral(wanted.map((e) => e.want))}::integer[])
              as w(id, want) on w.id = f.endpoint_id
            where f.n <= w.want
          ) free
          where s.endpoint_id = free.endpoint_id and s.slot = free.slot
          returning s.endpoint_id, s.slot`),
      );
      const leased = new Map<string, number[]>();
      for (const { endpoint_id, slot } of slots) leased.set(endpoint_id, [...(leased.get(endpoint_id) ?? []), slot]);
      let waitMs: number | undefined;
      const grants: Grant[] = [];
      for (const e of wanted) {
        const count = e.concurrent ? (leased.get(e.id)?.length ?? 0) : e.want;
        grants.push({ endpoint: e.id, count, slots: leased.get(e.id) ?? [], rated: e.rate !== null });
        if (count < e.due) {
          // Held back: look again once a token is there, or soon for a place another worker may free.
          const tokenMs =
            e.rate === null || e.tokens - count >= 1 ? SLOT_POLL_MS : ((1 - (e.tokens - count)) / e.rate) * 1000;
          waitMs = Math.min(waitMs ?? Number.POSITIVE_INFINITY, Math.max(5, tokenMs));
        }
      }
      await tx.execute(sql`
        update webhook_endpoints de set
          rate_tokens = case when de.rate_per_second is null then null else g.tokens - g.count end,
          rate_refilled_at = case when de.rate_per_second is null then null else greatest(now(), de.rate_refilled_at) end,
          throttled_at = case when g.count < g.due then now() else de.throttled_at end
        from unnest(${arrayLiteral(wanted.map((e) => e.id))}::text[], ${arrayLiteral(wanted.map((e) => e.tokens))}::double precision[],
          ${arrayLiteral(grants.map((g) => g.count))}::integer[], ${arrayLiteral(wanted.map((e) => e.due))}::integer[])
          as g(id, tokens, count, due)
        where de.id = g.id`);
      return { grants: grants.filter((grant) => grant.count > 0 || grant.slots.length > 0), waitMs };
    });
    if (waitMs !== undefined && this.timer === undefined)
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.wake();
      }, waitMs);
    return grants;
  }

  /**
   * Gives back what of `grants` the claim did not use (`taken`: deliveries claimed per endpoint): their tokens, up to
   * the burst, and their places.
   */
  private async refund(grants: Grant[], taken: Map<string, number>): Promise<void> {
    const unused = grants
      .map((grant) => ({ ...grant, unused: grant.count - (taken.get(grant.endpoint) ?? 0) }))
      .filter((grant) => grant.unused > 0);
    if (unused.length === 0) return;
    const ids = arrayLiteral(unused.filter((g) => g.rated).map((g) => g.endpoint));
    const counts = arrayLiteral(unused.filter((g) => g.rated).map((g) => g.unused));
    await db.execute(sql`
      update webhook_endpoints de
      set rate_tokens = least(coalesce(de.rate_burst, ceil(de.rate_per_second)), de.rate_tokens + g.unused)
      from unnest(${ids}::text[], ${counts}::integer[]) as g(id, unused) where de.id = g.id`);
    await this.free(
      unused.flatMap((g) => g.slots.slice(g.slots.length - g.unused).map((slot) => ({ endpoint: g.endpoint, slot }))),
    );
  }

  /**
   * Claims what `grants` allow, an endpoint at a time by `take` (a claim of `only` that endpoint), each delivery
   * marked with the place it holds, and gives back the rest of the grants without waiting for it.
   */
  async claim(grants: Grant[], take: (count: number, endpoint: string) => Promise<Claimed[]>): Promise<Claimed[]> {
    const rows: Claimed[] = [];
    const taken = new Map<string, number>();
    try {
      for (const grant of grants) {
        if (grant.count === 0) continue;
        const claimed = await take(grant.count, grant.endpoint);
        claimed.forEach((row, i) => {
          row.limited = true;
          row.slot = grant.slots[i];
        });
        taken.set(grant.endpoint, claimed.length);
        rows.push(...claimed);
      }
    } finally {
      outsideTransaction(() =>
        this.refund(grants, taken).catch((error: Error) =>
          log.warn({ err: error.message }, "giving back unused webhook endpoint limits failed; the places expire"),
        ),
      );
    }
    return rows;
  }

  /** The end of a delivery claimed under its endpoint's limits (sent or given back): its place is free. */
  done(row: Claimed): void {
    if (!row.limited) return;
    row.limited = false;
    if (row.slot === undefined) return;
    this.free([{ endpoint: row.endpoint_id, slot: row.slot }]).catch((error: Error) =>
      log.warn({ err: error.message }, "freeing a webhook endpoint's place failed; it expires"),
    );
  }

  /** Frees the places of attempts that ended, or of deliveries given back unsent. */
  private async free(places: Array<{ endpoint: string; slot: number }>): Promise<void> {
    if (places.length === 0) return;
    await db.execute(sql`
      update webhook_slots s set held_until = 'epoch'
      from unnest(${arrayLiteral(places.map((p) => p.endpoint))}::text[], ${arrayLiteral(places.map((p) => p.slot))}::integer[])
        as p(endpoint, slot)
      where s.endpoint_id = p.endpoint and s.slot = p.slot`);
    this.wake();
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
