/**
 * Room lives and participant stays, upserted straight from the log: both halves of a pair
 * carry the key, so either may arrive first; a stay left open inside an ended room life is
 * closed at the room's end and marked estimated until a real leave replaces it.
 */
import { sql } from "drizzle-orm";
import type { Database } from "../../db/client";
import { log } from "../../core/log";
import { arrayLiteral, rowsOf } from "../../db/rows";
import type { Touched } from "./fold-days";
import { MEDIA_EVENT_KINDS } from "../conference-log";
import { type LoggedRoom, roomsJson } from "./fold-log";

/** A timestamp as text of its milliseconds since the epoch, read back exactly by JavaScript. */
const epochMsText = (column: string) => `(floor(extract(epoch from ${column}) * 1000)::bigint)::text`;

/**
 * The events a fold takes: named by id (with the accounts they belong to), or every event of some
 * whole rooms (a refold's page).
 */
export type FoldPage = { ids: number[]; accounts: string[] } | { rooms: LoggedRoom[] };

/** The accounts a page's events belong to, each once. */
const accountsOf = (page: FoldPage) => [
  ...new Set("ids" in page ? page.accounts : page.rooms.map((room) => room.accountId)),
];

const PAGE_COLUMNS = sql.raw(
  "id, account_id, room, kind, breakout_id, room_jid, started_at as created_at, ended_at as destroyed_at, occupants, " +
    "occurred_at, subject",
);
const CONFERENCE_KINDS = sql.raw("('room_created', 'room_destroyed', 'occupant_joined', 'occupant_left')");
const MEDIA_KINDS = sql.raw(`(${MEDIA_EVENT_KINDS.map((kind) => `'${kind}'`).join(", ")})`);

/**
 * The first value a stay's events gave for a column, in the order of the events and of the
 * occupants each lists: the least of "id, position, value" as text compared byte by byte (a null
 * value makes the whole text null, which min skips), the "id, position" part being `k`, made once
 * per row. An aggregate with ORDER BY sorted each stay's rows once per column, about half of
 * pairing a page's halves; this needs no sort.
 */
const firstKnown = (column: string) => sql.raw(`substr(min((k || ${column}) collate "C"), 30)`);

/**
 * The page's events: by id, its conference events; by room, every event of the rooms, read once
 * through the log's room index, one scan per room (`offset 0` keeps the planner from hashing the
 * whole log instead, as it prefers when one account holds every event). A page of rooms never
 * crosses the client: the statement also answers the days its events fell on and the streams and
 * calls they name, which a page by id takes from the events the caller holds.
 */
function pageEvents(page: FoldPage) {
  if ("ids" in page)
    return sql`select ${PAGE_COLUMNS} from conference_events
      where id = any(${arrayLiteral(page.ids)}::bigint[]) and kind in ${CONFERENCE_KINDS}`;
  return sql`select e.* from jsonb_to_recordset(${roomsJson(page.rooms)}::jsonb) as k("accountId" text, room text)
    cross join lateral (
      select ${PAGE_COLUMNS} from conference_events c
      where c.account_id = k."accountId" and c.room = k.room offset 0
    ) as e`;
}

/**
 * Upserts, in one statement straight from the log, the room lives and stays the page's
 * conference events name, and answers the spans they touched, the rooms where a stay may now
 * be closed at its room's end, and the events that name no stay or life. Within the page, the
 * halves of a pair are merged first (latest end, first name known), so each key is written
 * once.
 */
export async function upsertConferenceFacts(tx: Database, page: FoldPage) {
  const rows = rowsOf<{
    what: "span" | "close" | "unusable" | "ended" | "day" | "subject";
    account_id: string;
    room: string;
    from_day: string;
    to_day: string;
    id: string;
  }>(
    await tx.execute(sql`
      with page as (${pageEvents(page)}),
      -- A destroy names the stays of everyone it lists; a join or a leave names its own.
      -- \`offset 0\` keeps it a subquery, so each row and its k are made once (k is read three times)
      -- and passed on as made: materialized, every row was stored first.
      usable as (
        select lpad(p.id::text, 19, '0') || lpad(o.n::text, 10, '0') as k, p.account_id, p.room, p.breakout_id,
          o.occupant->>'jid' as occupant_jid,
          (o.occupant->>'joinedAt')::timestamptz as joined_at, (o.occupant->>'leftAt')::timestamptz as left_at,
          o.occupant->>'userId' as user_id, o.occupant->>'name' as name, o.occupant->>'email' as email
        from page p
        cross join lateral jsonb_array_elements(p.occupants) with ordinality as o(occupant, n)
        where p.kind in ${CONFERENCE_KINDS}
        offset 0
      ),
      incoming as (
        select account_id, room, breakout_id, occupant_jid, joined_at, max(left_at) as left_at,
          ${firstKnown("user_id")} as user_id, ${firstKnown("name")} as name, ${firstKnown("email")} as email
        from usable
        group by account_id, room, breakout_id, occupant_jid, joined_at
      ),
      lives as (
        select account_id, room, breakout_id, created_at as started_at, max(destroyed_at) as ended_at,
          (array_agg(room_jid order by id) filter (where room_jid is not null))[1] as room_jid
        from page
        where kind in ${CONFERENCE_KINDS} and created_at is not null and (kind = 'room_created' or destroyed_at is not null)
        group by account_id, room, breakout_id, created_at
      ),
      -- Read before the upsert (a statement's parts see the same snapshot): lives this fold ends.
      -- One probe of the key per life (\`offset 0\` keeps the subquery correlated): as an anti-join
      -- the planner hashed every room life there is for each page, a fold's cost growing with the table.
      ending as (
        select l.account_id, l.room, l.breakout_id, l.started_at from lives l
        where l.ended_at is not null and not exists (
          select from room_sessions r
          where r.account_id = l.account_id and r.room = l.room and r.breakout_id = l.breakout_id and r.started_at = l.started_at
            and r.ended_at is not null
          offset 0)
      ),
      lives_upserted as (
        insert into room_sessions as r (account_id, room, breakout_id, room_jid, started_at, ended_at)
        select account_id, room, breakout_id, room_jid, started_at, ended_at from lives
        on conflict (account_id, room, breakout_id, started_at) do update set
          -- greatest() skips nulls, so a destroy seen earlier is never undone by a repeated create.
          ended_at = greatest(r.ended_at, excluded.ended_at),
          room_jid = coalesce(r.room_jid, excluded.room_jid),
          updated_at = now()
        returning r.account_id, r.room, r.started_at as joined_at, r.ended_at as left_at
      ),
      -- Each account of the page locked once, as a foreign key's check would lock it for every stay: an
      -- account deleted meanwhile waits for this fold, and its trigger then deletes the stays written here.
      owners as (
        select a.id from accounts a
        where a.id = any(array(select jsonb_array_elements_text(${JSON.stringify(accountsOf(page))}::jsonb)))
        for key share
      ),
      -- The page's rooms that hold a stay already: one probe of the key's first columns per room.
      stayed as (
        select r.account_id, r.room from (select distinct account_id, room from incoming) r
        where exists (select from participant_sessions q where q.account_id = r.account_id and q.room = r.room offset 0)
      ),
      -- Only the fold writes stays, under its rooms' locks (taken before this statement), so a stay not
      -- stored yet cannot be written by anyone else before this statement ends: new stays are inserted
      -- plainly, stored ones updated where they lie. In a room holding stays each stay is looked up by
      -- its key (\`offset 0\` keeps the probe correlated); in a room holding none, nothing is. An upsert
      -- checked every stay's key, then took a lock and wrote a second WAL record to confirm the insert:
      -- a fifth of writing 480,000 new stays.
      probed as (
        select i.*, q.ctid as stored, q.left_at as stored_left_at from incoming i
        left join stayed s on s.account_id = i.account_id and s.room = i.room
        left join lateral (
          select q.ctid, q.left_at from participant_sessions q
          where s.room is not null and q.account_id = i.account_id and q.room = i.room and q.joined_at = i.joined_at
            and q.breakout_id = i.breakout_id and q.occupant_jid = i.occupant_jid
          offset 0
        ) q on true
        where i.account_id in (select id from owners)
      ),
      stays_inserted as (
        insert into participant_sessions (account_id, room, breakout_id, occupant_jid, user_id, name, email, joined_at, left_at)
        select account_id, room, breakout_id, occupant_jid, user_id, name, email, joined_at, left_at from probed
        where stored is null
        returning account_id, room, joined_at, left_at
      ),
      stays_updated as (
        update participant_sessions p set
          user_id = coalesce(p.user_id, i.user_id),
          name = coalesce(p.name, i.name),
          email = coalesce(p.email, i.email),
          -- A reported leave replaces an estimated one; an event without a leave keeps what is there.
          left_at = case when i.left_at is null then p.left_at
            when p.left_estimated then i.left_at
            else greatest(p.left_at, i.left_at) end,
          left_estimated = p.left_estimated and i.left_at is null,
          updated_at = now()
        from probed i where p.ctid = i.stored
        -- The stay's leave before this statement too: a reported leave may be earlier than the
        -- estimate it replaces, and the days between are rebuilt too.
        returning p.account_id, p.room, p.joined_at, p.left_at, i.stored_left_at as previous_left_at
      ),
      spans as (
        select * from lives_upserted
        union all select account_id, room, joined_at, previous_left_at from stays_updated where previous_left_at is not null
        union all select account_id, room, joined_at, left_at from stays_updated
        union all select account_id, room, joined_at, left_at from stays_inserted
      )
      -- Grouped as dates and written as text once per group: to_char for every stay cost more than the grouping.
      select 'span' as what, account_id, room, to_char(from_day, 'YYYY-MM-DD') as from_day,
        to_char(to_day, 'YYYY-MM-DD') as to_day, null::text as id
      from (
        select account_id, room, (joined_at at time zone 'UTC')::date as from_day,
          (coalesce(left_at, joined_at) at time zone 'UTC')::date as to_day
        from spans group by 1, 2, 3, 4
      ) s
      -- The rooms where a stay may be left to close at the room's end: those with a stay the page
      -- leaves without a leave and, for a page by id, those with a life it ends (a stay folded
      -- earlier may be open). A page of whole rooms holds every half of their stays, so only its own
      -- stays can be open: a refold of rooms whose people all left skips the close.
      union all select 'close', account_id, room, null, null, null from (
        select account_id, room from incoming where left_at is null
        ${"ids" in page ? sql`union select account_id, room from lives where ended_at is not null` : sql``}
      ) c group by 2, 3
      -- A life is ended once, by the fold that first sees its destroy; its breakout id and start ride in from_day and id.
      union all select 'ended', account_id, room, breakout_id, null, ${sql.raw(epochMsText("started_at"))} from ending
      -- A join or a leave is usable when it lists someone (usable holds a row per occupant listed):
      -- a test of the event itself, where an anti-join against usable hashed every occupant of the page.
      union all select 'unusable', null, null, null, null, id::text from page p
      where p.kind in ${CONFERENCE_KINDS}
        and not (p.kind in ('occupant_joined', 'occupant_left') and jsonb_array_length(p.occupants) > 0)
        and not (p.kind = 'room_created' and p.created_at is not null)
        and not (p.kind = 'room_destroyed' and p.created_at is not null and p.destroyed_at is not null)
      ${
        "rooms" in page
          ? sql`-- A page of rooms: each UTC day its events fell on is rebuilt, each stream and call they name re-paired.
            union all select 'day', account_id, room, to_char(day, 'YYYY-MM-DD'), to_char(day, 'YYYY-MM-DD'), null
            from (select account_id, room, (occurred_at at time zone 'UTC')::date as day from page group by 1, 2, 3) d
            union all select 'subject', account_id, null, null, null, subject from page
            where kind in ${MEDIA_KINDS} and subject is not null group by 2, 6`
          : sql``
      }`),
  );
  const unusable = rows.filter((row) => row.what === "unusable").map((row) => Number(row.id));
  if (unusable.length > 0) {
    // Only an event_sync delivery names both halves of a stay; a bare occupant event cannot be paired.
    log.warn(
      { events: unusable },
      "conference events without an event_sync payload are kept in the log but not folded",
    );
  }
  return {
    ended: rows
      .filter((row) => row.what === "ended")
      .map((row) => ({
        accountId: row.account_id,
        room: row.room,
        breakoutId: row.from_day,
        startedAt: new Date(Number(row.id)),
      })),
    touched: rows
      .filter((row) => row.what === "span" || row.what === "day")
      .map((row) => ({
        accountId: row.account_id,
        room: row.room,
        from: new Date(`${row.from_day}T00:00:00Z`),
        to: new Date(`${row.to_day}T00:00:00Z`),
      })),
    subjects: rows
      .filter((row) => row.what === "subject")
      .map((row) => ({ accountId: row.account_id, subject: row.id })),
    closable: rows.filter((row) => row.what === "close").map((row) => ({ accountId: row.account_id, room: row.room })),
  };
}

/** Closes, at the room's end, every stay of the given rooms that has no leave inside an ended room life. */
export async function closeStaysAtRoomEnd(
  tx: Database,
  rooms: Array<{ accountId: string; room: string }>,
): Promise<Touched[]> {
  const rows = rowsOf<{ account_id: string; room: string; joined_at: string; left_at: string }>(
    await tx.execute(sql`
    update participant_sessions p
    set left_at = r.ended_at, left_estimated = true, updated_at = now()
    from room_sessions r, jsonb_to_recordset(${JSON.stringify(rooms)}::jsonb) as k("accountId" text, room text)
    where p.account_id = k."accountId" and p.room = k.room
      and r.account_id = p.account_id and r.room = p.room and r.breakout_id = p.breakout_id
      and p.left_at is null and r.ended_at is not null
      and p.joined_at >= r.started_at and p.joined_at <= r.ended_at
    returning p.account_id, p.room, p.joined_at, p.left_at`),
  );
  return rows.map((row) => ({
    accountId: row.account_id,
    room: row.room,
    from: new Date(row.joined_at),
    to: new Date(row.left_at),
  }));
}
