/** Reads of the conference event log: stored events as stored, and who is in a room by them. */
import { inArray, sql } from "drizzle-orm";
import { db } from "../../db/client";
import { rowsOf } from "../../db/rows";
import { conferenceEvents, type StoredEvent } from "./schema";

/** Stored events by id, as stored. */
export async function eventsByIds(ids: number[]): Promise<StoredEvent[]> {
  if (ids.length === 0) return [];
  const { id, accountId, kind, room, occurredAt, subject, payload } = conferenceEvents;
  const columns = { id, accountId, kind, room, occurredAt, subject, payload };
  return db.select(columns).from(conferenceEvents).where(inArray(id, ids));
}

export interface Occupancy {
  known: boolean;
  occupants: number;
}

/** How long a room's last join, leave or end keeps it known: older, nobody can say who is in it. */
const KNOWN_FOR = "1 day";

/**
 * Who is in a room by its stored events: each subject whose latest join or leave since the
 * room's last end is a join. `known` is false when no join, leave or end of the room was
 * stored within KNOWN_FOR: a room with no participant events at all is not "empty".
 */
export async function roomOccupancy(where: { accountId: string; room: string }): Promise<Occupancy> {
  const [row] = rowsOf<Occupancy>(
    await db.execute(sql`
      with moves as (
        select id, kind, subject, received_at from conference_events
        where account_id = ${where.accountId} and room = ${where.room} and kind in ('occupant_joined', 'occupant_left', 'room_destroyed')
      ),
      life as (select coalesce(max(id), 0) as after from moves where kind = 'room_destroyed'),
      latest as (
        select distinct on (subject) kind from moves, life
        where moves.id > life.after and kind <> 'room_destroyed' and subject is not null
        order by subject, moves.id desc
      )
      select exists (select 1 from moves where received_at > now() - ${KNOWN_FOR}::interval) as known,
        (select count(*)::int from latest where kind = 'occupant_joined') as occupants`),
  );
  return { known: row?.known === true, occupants: Number(row?.occupants ?? 0) };
}
