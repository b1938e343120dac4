/**
 * The room lives of a usage report read from PostgreSQL: a checked window's lives, then the
 * stays and media sessions that began in each (or in a life nobody recorded, which is inferred),
 * read in slices of time as one JSON array per room. Apart from what a report says of them
 * (meetings.ts): this file is the reading, and the cost of a report is mostly here.
 */
import { and, asc, eq, gte, inArray, isNull, lt, lte, or, type SQL, sql } from "drizzle-orm";
import { type Database, db } from "../../db/client";
import { rowsOf } from "../../db/rows";
import type { Window } from "./report-window";
import {
  type CallDetails,
  type MediaKind,
  mediaSessions,
  participantSessions,
  roomSessions,
  type roomUsageDaily,
} from "./schema";

/** A stay, its instants in milliseconds since the epoch. */
export interface Stay {
  occupantJid: string;
  userId: string | null;
  name: string | null;
  email: string | null;
  leftEstimated: boolean;
  joinedMs: number;
  leftMs: number | null;
  updatedMs: number;
}

/** A stay as PostgreSQL renders it in a room's JSON array, in the order of Stay's fields. */
type StayTuple = [string, string | null, string | null, string | null, boolean, number, number | null, number];
/** A stay as a report of figures alone reads it: its person, its join and its leave. */
type FigureTuple = [string, number, number | null];

/** The stays of one room, one JSON array per row: parsing it costs far less than decoding a row per stay. */
interface StayGroupRow {
  room: string;
  breakout_id: string;
  stays: string;
}

export interface Life {
  id: number | null;
  /** False for a life that began before the window: its stays belong to an earlier report. */
  listed: boolean;
  room: string;
  breakoutId: string;
  roomJid: string | null;
  startedAt: Date;
  endedAt: Date | null;
  createdAt: Date;
  updatedAt: Date;
  stays: Stay[];
  media: Array<typeof mediaSessions.$inferSelect>;
}

/** An instant in whole milliseconds since the epoch, as a JavaScript Date holds it, or null. */
const epochMs = (column: SQL) => sql`floor(extract(epoch from ${column}) * 1000)::bigint`;

/** The stays of a wide window are read in this many slices of time, a day or more each. */
const STAY_SLICES = 4;
const DAY_MS = 86_400_000;

/** [from, to) slices of time covering [start, end], the last one closed. */
function timeSlices(start: number, end: number): Array<[number, number]> {
  const count = Math.max(1, Math.min(STAY_SLICES, Math.floor((end - start) / DAY_MS)));
  const step = (end - start) / count;
  return Array.from({ length: count }, (_, index) => [
    start + Math.round(index * step),
    index === count - 1 ? end : start + Math.round((index + 1) * step),
  ]);
}

function latestOf(dates: Date[]): Date {
  return new Date(dates.reduce((latest, date) => Math.max(latest, date.getTime()), Number.NEGATIVE_INFINITY));
}

/** The life of a room that was under way at an instant: the latest one started at or before it. */
function coveringLife(lives: Life[], at: number): Life | undefined {
  let found: Life | undefined;
  for (const life of lives) {
    if (life.startedAt.getTime() <= at && (life.endedAt === null || life.endedAt.getTime() >= at)) {
      if (!found || life.startedAt > found.startedAt) found = life;
    }
  }
  return found;
}

/** A report whose window is checked and whose room lives are read: what remains cannot be refused. */
export interface PreparedReport {
  accountId: string;
  window: Window;
  lives: Life[];
  /** The instant the report is complete to: a stay, stream or call still open counts up to it. */
  asOf: Date;
  /** What the report reads through: the global handle, or the fold's transaction. */
  executor: Database;
}

export const inRooms = <
  T extends
    | typeof roomSessions.room
    | typeof participantSessions.room
    | typeof mediaSessions.room
    | typeof roomUsageDaily.room,
>(
  rooms: string[],
  column: T,
) => (rooms.length > 0 ? inArray(column, rooms) : undefined);

/**
 * The named rooms, each once, as a row source `k(named_room)` for a lateral read of each room's rows.
 */
const namedRooms = (rooms: string[]) =>
  sql`jsonb_array_elements_text(${JSON.stringify([...new Set(rooms)])}::jsonb) as k(named_room)`;

/** A media session as read by raw SQL, its instants in milliseconds since the epoch. */
interface MediaRow {
  id: string | number;
  room: string;
  kind: MediaKind;
  subject: string;
  started_ms: string | number;
  ended_ms: string | number | null;
  peak_viewers: string | number;
  details: CallDetails | string;
}

/** Reads the room lives of a checked window: an unreachable database is refused before any answer is sent. */
export async function prepareReport(
  accountId: string,
  window: Window,
  asOf: Date,
  executor: Database,
): Promise<PreparedReport> {
  const { start, end, rooms } = window;
  // Lives that began in the window are listed; those under way at its start only claim their stays.
  const lifeRows = await executor
    .select()
    .from(roomSessions)
    .where(
      and(
        eq(roomSessions.accountId, accountId),
        inRooms(rooms, roomSessions.room),
        lte(roomSessions.startedAt, end),
        or(gte(roomSessions.startedAt, start), isNull(roomSessions.endedAt), gte(roomSessions.endedAt, start)),
      ),
    )
    .orderBy(asc(roomSessions.startedAt), asc(roomSessions.room), asc(roomSessions.breakoutId));
  return {
    accountId,
    window,
    asOf,
    executor,
    lives: lifeRows.map((row) => ({ ...row, listed: row.startedAt >= start, stays: [], media: [] })),
  };
}

/** The lives of a prepared report's meetings, oldest first, each with its stays and media. */
export async function meetingLives(
  { accountId, window, lives, asOf, executor }: PreparedReport,
  detail: "entries" | "figures" = "entries",
): Promise<Life[]> {
  const { start, end, rooms } = window;
  const livesByRoom = Map.groupBy(lives, (life) => `${life.room}|${life.breakoutId}`);

  // Stays and media that began in a listed life, plus those that began in the window where no
  // life is known (the room's create and destroy never arrived): the latter form inferred entries.
  const latest = latestOf([end, ...lives.filter((life) => life.listed).map((life) => life.endedAt ?? asOf)]);
  // Read as one JSON array per room and slice of time, instants counted in milliseconds by
  // PostgreSQL: the week of every room is some hundred thousand stays, and decoding a row per
  // stay, then parsing its instants, was most of the report's time. The slices are asked for at
  // once, so PostgreSQL builds the later ones while this process reads the first.
  // Inside the fold's transaction the queries share one connection: one slice, asked once.
  const slices: Array<[number, number]> =
    executor === db ? timeSlices(start.getTime(), latest.getTime()) : [[start.getTime(), latest.getTime()]];
  // The fold's room.ended names a page's rooms: each room's rows are read by the index led by the
  // room, one probe per room (`offset 0` keeps the lateral join), with the window's end applied
  // after it. Given the rooms as a list and the window's two bounds, the planner took the account's
  // time index when the tables' statistics were young, and read every room's rows of the window.
  const perRoom = executor !== db && rooms.length > 0;
  // Figures need of a stay only its person (personOf's choice, made here) and its join and leave, as
  // a FigureTuple: a refold's room.ended read a third of the bytes, and parsing them was most of its
  // own CPU. Not when it was last updated, which only the report's entries show.
  const stayFields =
    detail === "figures"
      ? sql`coalesce(user_id, email, occupant_jid), ${epochMs(sql`joined_at`)}, ${epochMs(sql`left_at`)}`
      : sql`occupant_jid, user_id, name, email, left_estimated, ${epochMs(sql`joined_at`)}, ${epochMs(sql`left_at`)}, ${epochMs(sql`updated_at`)}`;
  const stayOf = (tuple: StayTuple | FigureTuple): Stay => {
    if (detail === "figures") {
      const [person, joinedMs, leftMs] = tuple as FigureTuple;
      return {
        occupantJid: person,
        userId: null,
        name: null,
        email: null,
        leftEstimated: false,
        joinedMs,
        leftMs,
        updatedMs: joinedMs,
      };
    }
    const [occupantJid, userId, name, email, leftEstimated, joinedMs, leftMs, updatedMs] = tuple as StayTuple;
    return { occupantJid, userId, name, email, leftEstimated, joinedMs, leftMs, updatedMs };
  };
  const stayGroups = slices.map(async ([from, to], index) => {
    const joinedFrom = gte(participantSessions.joinedAt, new Date(from));
    const joinedTo =
      index === slices.length - 1
        ? lte(participantSessions.joinedAt, new Date(to))
        : lt(participantSessions.joinedAt, new Date(to));
    const stays = perRoom
      ? sql`${namedRooms(rooms)} cross join lateral (
          select * from participant_sessions
          where ${and(eq(participantSessions.accountId, accountId), sql`room = k.named_room`, joinedFrom)} offset 0
        ) as participant_sessions where ${joinedTo}`
      : sql`participant_sessions where ${and(
          eq(participantSessions.accountId, accountId),
          inRooms(rooms, participantSessions.room),
          joinedFrom,
          joinedTo,
        )}`;
    return rowsOf<StayGroupRow>(
      await executor.execute(sql`
        select room, breakout_id, json_agg(json_build_array(${stayFields}))::text as stays
        from ${stays}
        group by room, breakout_id`),
    );
  });
  const mediaRows = perRoom
    ? rowsOf<MediaRow>(
        await executor.execute(sql`
          select m.id, m.room, m.kind, m.subject, ${epochMs(sql`m.started_at`)} as started_ms,
            ${epochMs(sql`m.ended_at`)} as ended_ms, m.peak_viewers, m.details
          from ${namedRooms(rooms)} cross join lateral (
            select * from media_sessions
            where ${and(eq(mediaSessions.accountId, accountId), sql`room = k.named_room`, gte(mediaSessions.startedAt, start))}
            offset 0
          ) as m
          where m.started_at <= ${latest.toISOString()}::timestamptz`),
      ).map((row) => ({
        id: Number(row.id),
        accountId,
        room: row.room,
        kind: row.kind,
        subject: row.subject,
        startedAt: new Date(Number(row.started_ms)),
        endedAt: row.ended_ms === null ? null : new Date(Number(row.ended_ms)),
        peakViewers: Number(row.peak_viewers),
        details: typeof row.details === "string" ? (JSON.parse(row.details) as CallDetails) : row.details,
      }))
    : await executor
        .select()
        .from(mediaSessions)
        .where(
          and(
            eq(mediaSessions.accountId, accountId),
            inRooms(rooms, mediaSessions.room),
            gte(mediaSessions.startedAt, start),
            lte(mediaSessions.startedAt, latest),
          ),
        );

  const inferred = new Map<string, Life>();
  const orphanLife = (room: string, breakoutId: string, at: Date, updatedAt: Date): Life | undefined => {
    if (at > end) return undefined;
    const key = `${room}|${breakoutId}`;
    let life = inferred.get(key);
    if (!life) {
      life = {
        id: null,
        listed: true,
        room,
        breakoutId,
        roomJid: null,
        startedAt: at,
        endedAt: null,
        createdAt: updatedAt,
        updatedAt,
        stays: [],
        media: [],
      };
      inferred.set(key, life);
    }
    if (at < life.startedAt) life.startedAt = at;
    return life;
  };
  // Every slice's failure is handled here, so one failing while an earlier one is read is no unhandled rejection.
  void Promise.allSettled(stayGroups);
  for (const slice of stayGroups) {
    for (const group of await slice) {
      const roomLives = livesByRoom.get(`${group.room}|${group.breakout_id}`) ?? [];
      for (const tuple of JSON.parse(group.stays) as Array<StayTuple | FigureTuple>) {
        const stay = stayOf(tuple);
        const life = coveringLife(roomLives, stay.joinedMs);
        if (life) life.stays.push(stay);
        else
          orphanLife(group.room, group.breakout_id, new Date(stay.joinedMs), new Date(stay.updatedMs))?.stays.push(
            stay,
          );
      }
    }
  }
  for (const media of mediaRows) {
    const life = coveringLife(livesByRoom.get(`${media.room}|`) ?? [], media.startedAt.getTime());
    if (life) life.media.push(media);
    else orphanLife(media.room, "", media.startedAt, media.startedAt)?.media.push(media);
  }

  return [...lives.filter((life) => life.listed), ...inferred.values()].sort(
    (a, b) =>
      a.startedAt.getTime() - b.startedAt.getTime() ||
      a.room.localeCompare(b.room) ||
      a.breakoutId.localeCompare(b.breakoutId),
  );
}
