/** The usage report built whole (the console's pages and the CSV download use it), and its CSV form. */
import { db } from "../../db/client";
import { foldBeforeReport } from "./fold";
import { type PreparedReport, prepareReport } from "./meeting-lives";
import { describeMeetings, minutes, type Seconds } from "./meetings";
import type { ReportRoom, ReportTotals, UsageReport } from "./model";
import { reportDays } from "./report-days";
import { type ReportQuery, reportWindow } from "./report-window";

/**
 * Checks the window (a bad one is refused before anything else), folds what of the account's
 * events in the window's rooms was acknowledged before the report was asked for and is not
 * folded yet (read after write), and reads the room lives. The report is complete to its
 * `as_of`: the instant it was asked for, or earlier when a backlog was left to the cdr worker.
 */
export async function prepareCurrentReport(
  accountId: string,
  query: ReportQuery,
  askedAt = new Date(),
): Promise<PreparedReport> {
  const window = reportWindow(query, askedAt);
  const asOf = await foldBeforeReport(accountId, window.rooms, askedAt);
  return prepareReport(accountId, window, asOf, db);
}

export function reportTotals(described: Array<{ room: ReportRoom; seconds: Seconds }>): ReportTotals {
  const sum = (pick: (seconds: Seconds) => number) =>
    minutes(described.reduce((total, entry) => total + pick(entry.seconds), 0));
  const people = new Set(
    described.flatMap(({ room }) => room.users.map((user) => user.user_id ?? user.email ?? user.occupant_jid)),
  );
  return {
    rooms: described.length,
    participant_minutes: sum((seconds) => seconds.participant),
    phone_minutes: sum((seconds) => seconds.phone),
    streaming_minutes: sum((seconds) => seconds.streaming),
    recording_minutes: sum((seconds) => seconds.recording),
    peak_participants: described.reduce((peak, { room }) => Math.max(peak, room.media_usage.peak_participants), 0),
    distinct_participants: people.size,
    open_stays: described.reduce(
      (open, { room }) => open + room.users.filter((user) => user.left_at === null).length,
      0,
    ),
  };
}

/** The report whole: its rooms, days and totals from the same meetings, counted to the same as_of. */
export async function usageReport(accountId: string, query: ReportQuery, now = new Date()): Promise<UsageReport> {
  const prepared = await prepareCurrentReport(accountId, query, now);
  const meetings = await describeMeetings(prepared);
  return {
    start_date: prepared.window.start.toISOString(),
    end_date: prepared.window.end.toISOString(),
    as_of: prepared.asOf.toISOString(),
    rooms: meetings.map(({ room }) => room),
    days: reportDays(meetings, prepared.asOf),
    totals: reportTotals(meetings),
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
  "as_of",
] as const;

function csvField(value: unknown): string {
  if (value === null || value === undefined) return "";
  const text = String(value);
  // Quote what would break a row, and defuse leading characters spreadsheets run as formulas.
  const safe = /^[=+\-@\t\r]/.test(text) && Number.isNaN(Number(text)) ? `'${text}` : text;
  return /[",\r\n]/.test(safe) ? `"${safe.replaceAll('"', '""')}"` : safe;
}

/** A meeting's CSV lines: one per participant stay, or one when it had nobody; an open stay's minutes run to `asOf`. */
export function csvLines(room: ReportRoom, asOf: string): string {
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
    asOf,
  ];
  const users = room.users.length > 0 ? room.users : [null];
  let lines = "";
  for (const user of users) {
    const userColumns = user
      ? [
          user.user_id,
          user.name,
          user.email,
          user.occupant_jid,
          user.joined_at,
          user.left_at,
          user.left_estimated,
          user.minutes,
        ]
      : [null, null, null, null, null, null, null, null];
    lines += `${[...roomColumns, ...userColumns, ...totals].map(csvField).join(",")}\r\n`;
  }
  return lines;
}

/** The report as CSV (RFC 4180): one line per participant stay, or one per room that had nobody. */
export function reportCsv(report: UsageReport): string {
  return `${CSV_COLUMNS.join(",")}\r\n${report.rooms.map((room) => csvLines(room, report.as_of)).join("")}`;
}
