/** The stored side of an endpoint's limits that its settings change (see endpoint-limits.ts for their use). */
import { sql } from "drizzle-orm";
import type { Database } from "../../db/client";

/** How long after a claim last held back one of its deliveries an endpoint's health still says throttled. */
export const THROTTLED_SECONDS = 2;

/** Makes an endpoint's places match its max_in_flight (none for null); the ones in use stay held. */
export async function syncSlots(handle: Database, endpointId: string, maxInFlight: number | null): Promise<void> {
  await handle.execute(
    sql`delete from webhook_slots where endpoint_id = ${endpointId} and slot >= ${maxInFlight ?? 0}`,
  );
  if (maxInFlight !== null)
    await handle.execute(sql`
      insert into webhook_slots (endpoint_id, slot)
      select ${endpointId}, generate_series(0, ${maxInFlight - 1}) on conflict do nothing`);
}
