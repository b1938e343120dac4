/**
 * The event log: an account's catalogue events read by cursor, and their retention. Every
 * query names the account, so no account ever reaches another's events.
 */
import { and, asc, eq, gt, inArray, sql } from "drizzle-orm";
import { config } from "../../core/config";
import { db } from "../../db/client";
import { rowsOf } from "../../db/rows";
import { AppError } from "../../core/errors";
import { EVENT_TYPES, type EventType } from "./event-types";
import type { PublicEvent } from "./model";
import { events } from "./schema";

type EventRow = typeof events.$inferSelect;

export function publicEvent(
  row: Pick<EventRow, "id" | "accountId" | "type" | "sequence" | "createdAt" | "data">,
): PublicEvent {
  // The row was written from the type's own data model by recordEvent.
  return {
    id: row.id,
    type: row.type,
    account_id: row.accountId,
    created_at: row.createdAt.toISOString(),
    sequence: Number(row.sequence),
    data: row.data,
  } as PublicEvent;
}

export function parseTypes(types: string | undefined): EventType[] | undefined {
  if (types === undefined || types.trim() === "") return undefined;
  const wanted = types
    .split(",")
    .map((type) => type.trim())
    .filter(Boolean);
  for (const type of wanted) {
    if (!(EVENT_TYPES as string[]).includes(type))
      throw new AppError(
        "validation_failed",
        `types: unknown event type "${type}"; the catalogue has ${EVENT_TYPES.join(", ")}`,
      );
  }
  return wanted as EventType[];
}

/** The account's events after a sequence number, oldest first. */
export async function listEvents(
  accountId: string,
  query: { after?: number; types?: EventType[]; limit?: number },
): Promise<{ events: PublicEvent[]; next_after: number }> {
  const after = query.after ?? 0;
  const limit = query.limit ?? 100;
  const rows = await db
    .select()
    .from(events)
    .where(
      and(
        eq(events.accountId, accountId),
        gt(events.sequence, after),
        query.types ? inArray(events.type, query.types) : undefined,
      ),
    )
    .orderBy(asc(events.sequence))
    .limit(limit);
  const page = rows.map(publicEvent);
  return { events: page, next_after: page.at(-1)?.sequence ?? after };
}

/** Deletes events older than EVENT_RETENTION_DAYS (their deliveries go with them), in batches. */
export async function purgeOldEvents(batchSize = 5_000): Promise<number> {
  let purged = 0;
  for (;;) {
    const removed = rowsOf<{ id: string }>(
      await db.execute(sql`
        delete from events where id in (
          select id from events where created_at < now() - make_interval(days => ${config.webhooks.eventRetentionDays}) limit ${batchSize}
        ) returning id`),
    );
    purged += removed.length;
    if (removed.length < batchSize) return purged;
  }
}
