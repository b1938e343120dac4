/**
 * The usage report (call detail records). A room entry is one life of a room (created to
 * destroyed) that started inside the window, with the stays, streams, recordings and calls
 * that began during it; a room's record belongs to the window its start falls in, so
 * back-to-back windows never count a meeting twice.
 */
import { and, asc, eq, gte, inArray, isNull, lte, or } from "drizzle-orm";
import { roomKey } from "../../core/room-key";
import { db } from "../../db/client";
import { AppError } from "../../core/errors";
import { mediaSessions, participantSessions, roomSessions, roomUsageDaily } from "./schema";

export interface ReportQuery {
  roomNames?: string[];
  startDate?: string;
  endDate?: string;
}

export interface ReportUser {
  user_id: string | null;
  name: string | null;
  email: string | null;
  occupant_jid: string;
  joined_at: string;
  left_at: string | null;
  left_estimated: boolean;
  minutes: number;
}

export interface ReportStream {
  stream_name: string;
  kind: "streaming" | "recording";
  started_at: string;
  ended_at: string | null;
  minutes: number;
  peak_viewers: number;
}

export interface ReportCall {
  call_id: string;
  caller: string | null;
  callee: string | null;
  answered: boolean;
  reason: string | null;
  started_at: string;
  ended_at: string | null;
  minutes: number;
}

/** The figures kept for a room, a room's day and (without peak_viewers) the whole report. */
interface UsageFigures {
  participant_minutes: number;
  phone_minutes: number;
  streaming_minutes: number;
  recording_minutes: number;
  peak_participants: number;
  distinct_participants: number;
  peak_viewers: number;
}

export interface MediaUsage extends UsageFigures {
  streams: ReportStream[];
  calls: ReportCall[];
}

export interface ReportRoom {
  room_id: string;
  room_details: { OwnerId: string; AppId: string | null; MeetingId: string };
  room_type: "conference" | "breakout";
  status: "active" | "inactive";
  inferred: boolean;
  StartedAt: string;
  EndedAt: string | null;
  CreatedAt: string;
  UpdatedAt: string;
  users: ReportUser[];
  media_usage: MediaUsage;
}

export interface ReportDay extends UsageFigures {
  room_name: string;
  date: string;
}

export interface ReportTotals extends Omit<UsageFigures, "peak_viewers"> {
  rooms: number;
}

export interface UsageReport {
  start_date: string;
  end_date: string;
  rooms: ReportRoom[];
  days: ReportDay[];
  totals: ReportTotals;
}

const WEEK_MS = 7 * 86_400_000;
/** Minutes with two decimals, from whole seconds. */
const minutes = (seconds: number) => Math.round((seconds / 60) * 100) / 100;
const iso = (date: Date | null) => (date === null ? null : date.toISOString());
const unix = (date: Date) => Math.floor(date.getTime() / 1000);

/** ISO 8601: a date, or a date-time with seconds, fraction and zone optional. */
const ISO_8601 = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/i;

function parseDate(field: string, value: string | undefined, fallback: Date): Date {
  if (value === undefined || value === "") return fallback;
  const hasZone = /(?:Z|[+-]\d{2}:?\d{2})$/i.test(value) || value.length === 10;
  const parsed = ISO_8601.test(value.trim()) ? new Date(hasZone ? value.trim() : `${value.trim()}Z`) : new Date(Number.NaN);
  if (Number.isNaN(parsed.getTime())) {
    throw new AppError("validation_failed", `${field}: "${value}" is not an ISO 8601 date-time such as 2026-11-21T09:00:00Z`);
  }
  return parsed;
}

export function reportWindow(query: ReportQuery, now = new Date()): { start: Date; end: Date; rooms: string[] } {
  const end = parseDate("end_date", query.endDate, now);
  const start = parseDate("start_date", query.startDate, new Date(end.getTime() - WEEK_MS));
  if (start > end) throw new AppError("validation_failed", "start_date: must not be after end_date");
  const rooms = [...new Set((query.roomNames ?? []).map((name) => (name.trim() === "" ? "" : roomKey(name.trim()))))];
  rooms.forEach((name, index) => {
    if (name === "") throw new AppError("validation_failed", `room_name.${index}: must not be empty`);
  });
  return { start, end, rooms };
}

type Stay = Omit<typeof participantSessions.$inferSelect, "id" | "accountId">;

interface Life {
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

function secondsBetween(from: Date, to: Date | null, now: Date): number {
  return Math.max(0, Math.round(((to ?? now).getTime() - from.getTime()) / 1000));
}

/** Most people present at once; at one instant leaves count before joins. */
function peakPresence(stays: Stay[], now: Date): number {
  const points = stays.flatMap((stay) => [
    [stay.joinedAt.getTime(), 1],
    [Math.max(stay.joinedAt.getTime(), (stay.leftAt ?? now).getTime()), -1],
  ]);
  points.sort((a, b) => a[0]! - b[0]! || a[1]! - b[1]!);
  let present = 0;
  let peak = 0;
  for (const [, delta] of points) {
    present += delta!;
    peak = Math.max(peak, present);
  }
  return peak;
}

function latestOf(dates: Date[]): Date {
  return new Date(dates.reduce((latest, date) => Math.max(latest, date.getTime()), Number.NEGATIVE_INFINITY));
}

function lastLeave(stays: Stay[]): Date | null {
  return stays.length === 0 ? null : latestOf(stays.map((stay) => stay.leftAt!));
}

const personOf = (stay: Stay) => stay.userId ?? stay.email ?? stay.occupantJid;

interface Seconds {
  participant: number;
  phone: number;
  streaming: number;
  recording: number;
}

function describeRoom(accountId: string, life: Life, now: Date): { room: ReportRoom; seconds: Seconds } {
  const users: ReportUser[] = life.stays
    .sort((a, b) => a.joinedAt.getTime() - b.joinedAt.getTime() || a.occupantJid.localeCompare(b.occupantJid))
    .map((stay) => ({
      user_id: stay.userId,
      name: stay.name,
      email: stay.email,
      occupant_jid: stay.occupantJid,
      joined_at: stay.joinedAt.toISOString(),
      left_at: iso(stay.leftAt),
      left_estimated: stay.leftEstimated,
      minutes: minutes(secondsBetween(stay.joinedAt, stay.leftAt, now)),
    }));
  const participantSeconds = life.stays.reduce((sum, stay) => sum + secondsBetween(stay.joinedAt, stay.leftAt, now), 0);
  const mediaSeconds = (kind: string) =>
    life.media.filter((media) => media.kind === kind).reduce((sum, media) => sum + secondsBetween(media.startedAt, media.endedAt, now), 0);
  const streams: ReportStream[] = life.media
    .filter((media) => media.kind !== "phone")
    .map((media) => ({
      stream_name: media.subject,
      kind: media.kind as ReportStream["kind"],
      started_at: media.startedAt.toISOString(),
      ended_at: iso(media.endedAt),
      minutes: minutes(secondsBetween(media.startedAt, media.endedAt, now)),
      peak_viewers: media.peakViewers,
    }));
  const calls: ReportCall[] = life.media
    .filter((media) => media.kind === "phone")
    .map((media) => ({
      call_id: media.subject,
      caller: (media.details.caller as string | null) ?? null,
      callee: (media.details.callee as string | null) ?? null,
      answered: media.details.answered === true,
      reason: (media.details.reason as string | null) ?? null,
      started_at: media.startedAt.toISOString(),
      ended_at: iso(media.endedAt),
      minutes: minutes(secondsBetween(media.startedAt, media.endedAt, now)),
    }));
  const open = life.id === null ? life.stays.some((stay) => stay.leftAt === null) : life.endedAt === null;
  const updatedAt = latestOf([life.updatedAt, ...life.stays.map((stay) => stay.updatedAt)]);
  const meeting = `${life.room}${life.breakoutId ? `/${life.breakoutId}` : ""}@${unix(life.startedAt)}`;
  const seconds: Seconds = {
    participant: participantSeconds,
    phone: mediaSeconds("phone"),
    streaming: mediaSeconds("streaming"),
    recording: mediaSeconds("recording"),
  };
  const room: ReportRoom = {
    room_id: life.room,
    room_details: { OwnerId: accountId, AppId: life.roomJid?.split("@")[1] ?? null, MeetingId: meeting },
    room_type: life.breakoutId ? "breakout" : "conference",
    status: open ? "active" : "inactive",
    inferred: life.id === null,
    StartedAt: life.startedAt.toISOString(),
    EndedAt: open ? null : iso(life.endedAt ?? lastLeave(life.stays)),
    CreatedAt: life.createdAt.toISOString(),
    UpdatedAt: updatedAt.toISOString(),
    users,
    media_usage: {
      participant_minutes: minutes(seconds.participant),
      phone_minutes: minutes(seconds.phone),
      streaming_minutes: minutes(seconds.streaming),
      recording_minutes: minutes(seconds.recording),
      peak_participants: peakPresence(life.stays, now),
      distinct_participants: new Set(life.stays.map(personOf)).size,
      peak_viewers: Math.max(0, ...life.media.filter((media) => media.kind === "streaming").map((media) => media.peakViewers)),
      streams,
      calls,
    },
  };
  return { room, seconds };
}

/** The life of a room that was under way at an instant: the latest one started at or before it. */
function coveringLife(lives: Life[], at: Date): Life | undefined {
  let found: Life | undefined;
  for (const life of lives) {
    if (life.startedAt <= at && (life.endedAt === null || life.endedAt >= at)) {
      if (!found || life.startedAt > found.startedAt) found = life;
    }
  }
  return found;
}

interface Window {
  start: Date;
  end: Date;
  rooms: string[];
}

/** A report whose window is checked and whose room lives are read: what remains cannot be refused. */
interface PreparedReport {
  accountId: string;
  window: Window;
  lives: Life[];
  now: Date;
}

const inRooms = <T extends typeof roomSessions.room | typeof participantSessions.room | typeof mediaSessions.room | typeof roomUsageDaily.room>(
  rooms: string[],
  column: T,
) => (rooms.length > 0 ? inArray(column, rooms) : undefined);

/** Checks the window and reads the room lives: a bad window or an unreachable database is refused before any answer is sent. */
async function prepareReport(accountId: string, query: ReportQuery, now: Date): Promise<PreparedReport> {
  const window = reportWindow(query, now);
  const { start, end, rooms } = window;
  // Lives that began in the window are listed; those under way at its start only claim their stays.
  const lifeRows = await db
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
  return { accountId, window, now, lives: lifeRows.map((row) => ({ ...row, listed: row.startedAt >= start, stays: [], media: [] })) };
}

/** The meetings of a prepared report, oldest first, each with its seconds for the totals. */
async function describeMeetings({ accountId, window, lives, now }: PreparedReport) {
  const { start, end, rooms } = window;
  const livesByRoom = new Map<string, Life[]>();
  for (const life of lives) {
    const key = `${life.room}|${life.breakoutId}`;
    livesByRoom.set(key, [...(livesByRoom.get(key) ?? []), life]);
  }

  // Stays and media that began in a listed life, plus those that began in the window where no
  // life is known (the room's create and destroy never arrived): the latter form inferred entries.
  const latest = latestOf([end, ...lives.filter((life) => life.listed).map((life) => life.endedAt ?? now)]);
  const stayRows = await db
    .select({
      room: participantSessions.room,
      breakoutId: participantSessions.breakoutId,
      occupantJid: participantSessions.occupantJid,
      userId: participantSessions.userId,
      name: participantSessions.name,
      email: participantSessions.email,
      joinedAt: participantSessions.joinedAt,
      leftAt: participantSessions.leftAt,
      leftEstimated: participantSessions.leftEstimated,
      updatedAt: participantSessions.updatedAt,
    })
    .from(participantSessions)
    .where(
      and(
        eq(participantSessions.accountId, accountId),
        inRooms(rooms, participantSessions.room),
        gte(participantSessions.joinedAt, start),
        lte(participantSessions.joinedAt, latest),
      ),
    );
  const mediaRows = await db
    .select()
    .from(mediaSessions)
    .where(and(eq(mediaSessions.accountId, accountId), inRooms(rooms, mediaSessions.room), gte(mediaSessions.startedAt, start), lte(mediaSessions.startedAt, latest)));

  const inferred = new Map<string, Life>();
  const orphanLife = (room: string, breakoutId: string, at: Date, updatedAt: Date): Life | undefined => {
    if (at > end) return undefined;
    const key = `${room}|${breakoutId}`;
    let life = inferred.get(key);
    if (!life) {
      life = { id: null, listed: true, room, breakoutId, roomJid: null, startedAt: at, endedAt: null, createdAt: updatedAt, updatedAt, stays: [], media: [] };
      inferred.set(key, life);
    }
    if (at < life.startedAt) life.startedAt = at;
    return life;
  };
  for (const stay of stayRows) {
    const life = coveringLife(livesByRoom.get(`${stay.room}|${stay.breakoutId}`) ?? [], stay.joinedAt);
    if (life) life.stays.push(stay);
    else orphanLife(stay.room, stay.breakoutId, stay.joinedAt, stay.updatedAt)?.stays.push(stay);
  }
  for (const media of mediaRows) {
    const life = coveringLife(livesByRoom.get(`${media.room}|`) ?? [], media.startedAt);
    if (life) life.media.push(media);
    else orphanLife(media.room, "", media.startedAt, media.startedAt)?.media.push(media);
  }

  return [...lives.filter((life) => life.listed), ...inferred.values()]
    .sort((a, b) => a.startedAt.getTime() - b.startedAt.getTime() || a.room.localeCompare(b.room) || a.breakoutId.localeCompare(b.breakoutId))
    .map((life) => describeRoom(accountId, life, now));
}

/** Settled usage per room and UTC day, straight from the daily rows. */
async function reportDays({ accountId, window }: PreparedReport): Promise<ReportDay[]> {
  const { start, end, rooms } = window;
  const dayRows = await db
    .select()
    .from(roomUsageDaily)
    .where(
      and(
        eq(roomUsageDaily.accountId, accountId),
        inRooms(rooms, roomUsageDaily.room),
        gte(roomUsageDaily.day, start.toISOString().slice(0, 10)),
        // An end at midnight does not reach into the day it opens.
        lte(roomUsageDaily.day, new Date(Math.max(start.getTime(), end.getTime() - 1)).toISOString().slice(0, 10)),
      ),
    )
    .orderBy(asc(roomUsageDaily.day), asc(roomUsageDaily.room));
  return dayRows.map((row) => ({
    room_name: row.room,
    date: row.day,
    participant_minutes: minutes(row.participantSeconds),
    peak_participants: row.peakParticipants,
    distinct_participants: row.distinctParticipants,
    phone_minutes: minutes(row.phoneSeconds),
    streaming_minutes: minutes(row.streamingSeconds),
    recording_minutes: minutes(row.recordingSeconds),
    peak_viewers: row.peakViewers,
  }));
}

function reportTotals(described: Array<{ room: ReportRoom; seconds: Seconds }>): ReportTotals {
  const sum = (pick: (seconds: Seconds) => number) => minutes(described.reduce((total, entry) => total + pick(entry.seconds), 0));
  const people = new Set(described.flatMap(({ room }) => room.users.map((user) => user.user_id ?? user.email ?? user.occupant_jid)));
  return {
    rooms: described.length,
    participant_minutes: sum((seconds) => seconds.participant),
    phone_minutes: sum((seconds) => seconds.phone),
    streaming_minutes: sum((seconds) => seconds.streaming),
    recording_minutes: sum((seconds) => seconds.recording),
    peak_participants: described.reduce((peak, { room }) => Math.max(peak, room.media_usage.peak_participants), 0),
    distinct_participants: people.size,
  };
}

export async function usageReport(accountId: string, query: ReportQuery, now = new Date()): Promise<UsageReport> {
  const prepared = await prepareReport(accountId, query, now);
  const described = await describeMeetings(prepared);
  return {
    start_date: prepared.window.start.toISOString(),
    end_date: prepared.window.end.toISOString(),
    rooms: described.map(({ room }) => room),
    days: await reportDays(prepared),
    totals: reportTotals(described),
  };
}

/** About this many bytes go out per chunk of a streamed report. */
const CHUNK_CHARS = 64 * 1024;

/** Joins the pieces of a streamed answer into chunks of about CHUNK_CHARS. */
function chunked(pieces: () => AsyncGenerator<string>): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  const source = pieces();
  // The first piece (the head) goes out alone, so the first byte never waits for the meetings.
  let head = true;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      let chunk = "";
      while (chunk.length < (head ? 1 : CHUNK_CHARS)) {
        const next = await source.next();
        if (next.done) {
          if (chunk !== "") controller.enqueue(encoder.encode(chunk));
          controller.close();
          return;
        }
        chunk += next.value;
      }
      head = false;
      controller.enqueue(encoder.encode(chunk));
    },
    async cancel() {
      await source.return(undefined);
    },
  });
}

/**
 * The report as streamed JSON, the same document usageReport answers: the head goes out
 * once the window is checked and the room lives are read (a refusal is still a 4xx or 5xx),
 * then meeting after meeting, the days and the totals.
 */
export async function usageReportJson(accountId: string, query: ReportQuery, now = new Date()): Promise<ReadableStream<Uint8Array>> {
  const prepared = await prepareReport(accountId, query, now);
  return chunked(async function* () {
    yield `{"start_date":${JSON.stringify(prepared.window.start.toISOString())},"end_date":${JSON.stringify(prepared.window.end.toISOString())},"rooms":[`;
    const described = await describeMeetings(prepared);
    for (const [index, { room }] of described.entries()) yield `${index === 0 ? "" : ","}${JSON.stringify(room)}`;
    yield `],"days":${JSON.stringify(await reportDays(prepared))},"totals":${JSON.stringify(reportTotals(described))}}`;
  });
}

/** The report as streamed CSV (see reportCsv), its header line first. */
export async function usageReportCsv(accountId: string, query: ReportQuery, now = new Date()): Promise<ReadableStream<Uint8Array>> {
  const prepared = await prepareReport(accountId, query, now);
  return chunked(async function* () {
    yield `${CSV_COLUMNS.join(",")}\r\n`;
    for (const { room } of await describeMeetings(prepared)) yield csvLines(room);
  });
}

export const CSV_COLUMNS = [
  "room_id",
  "meeting_id",
  "room_type",
  "status",
  "inferred",
  "owner_id",
  "app_id",
  "started_at",
  "ended_at",
  "user_id",
  "user_name",
  "user_email",
  "occupant_jid",
  "joined_at",
  "left_at",
  "left_estimated",
  "user_minutes",
  "room_participant_minutes",
  "room_phone_minutes",
  "room_streaming_minutes",
  "room_recording_minutes",
  "room_peak_participants",
  "room_distinct_participants",
  "room_peak_viewers",
] as const;

function csvField(value: unknown): string {
  if (value === null || value === undefined) return "";
  const text = String(value);
  // Quote what would break a row, and defuse leading characters spreadsheets run as formulas.
  const safe = /^[=+\-@\t\r]/.test(text) && Number.isNaN(Number(text)) ? `'${text}` : text;
  return /[",\r\n]/.test(safe) ? `"${safe.replaceAll('"', '""')}"` : safe;
}

/** A meeting's CSV lines: one per participant stay, or one when it had nobody. */
function csvLines(room: ReportRoom): string {
  const usage = room.media_usage;
  const roomColumns = [
    room.room_id,
    room.room_details.MeetingId,
    room.room_type,
    room.status,
    room.inferred,
    room.room_details.OwnerId,
    room.room_details.AppId,
    room.StartedAt,
    room.EndedAt,
  ];
  const totals = [
    usage.participant_minutes,
    usage.phone_minutes,
    usage.streaming_minutes,
    usage.recording_minutes,
    usage.peak_participants,
    usage.distinct_participants,
    usage.peak_viewers,
  ];
  const users = room.users.length > 0 ? room.users : [null];
  let lines = "";
  for (const user of users) {
    const userColumns = user
      ? [user.user_id, user.name, user.email, user.occupant_jid, user.joined_at, user.left_at, user.left_estimated, user.minutes]
      : [null, null, null, null, null, null, null, null];
    lines += `${[...roomColumns, ...userColumns, ...totals].map(csvField).join(",")}\r\n`;
  }
  return lines;
}

/** The report as CSV (RFC 4180): one line per participant stay, or one per room that had nobody. */
export function reportCsv(report: UsageReport): string {
  return `${CSV_COLUMNS.join(",")}\r\n${report.rooms.map(csvLines).join("")}`;
}
