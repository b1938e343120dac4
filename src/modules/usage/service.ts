/** The usage report built whole (the console's pages and the CSV download use it), and its CSV form. */
import { and, asc, eq, gte, lte } from "drizzle-orm";
import { db } from "../../db/client";
import { inRooms, minutes, type PreparedReport, prepareReport, describeMeetings, type Seconds } from "./meetings";
import type { ReportDay, ReportRoom, ReportTotals, UsageReport } from "./model";
import type { ReportQuery } from "./report-window";
import { roomUsageDaily } from "./schema";

/** Settled usage per room and UTC day, straight from the daily rows. */
export async function reportDays({ accountId, window }: PreparedReport): Promise<ReportDay[]> {
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

export function reportTotals(described: Array<{ room: ReportRoom; seconds: Seconds }>): ReportTotals {
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
export function csvLines(room: ReportRoom): string {
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
