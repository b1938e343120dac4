/** The window of a usage report: its dates checked, its room names normalised. */
import { roomKey } from "../../core/room-key";
import { AppError } from "../../core/errors";

export interface ReportQuery {
  roomNames?: string[];
  startDate?: string;
  endDate?: string;
}

const WEEK_MS = 7 * 86_400_000;

/** ISO 8601: a date, or a date-time with seconds, fraction and zone optional. */
const ISO_8601 = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/i;

function parseDate(field: string, value: string | undefined, fallback: Date): Date {
  if (value === undefined || value === "") return fallback;
  const hasZone = /(?:Z|[+-]\d{2}:?\d{2})$/i.test(value) || value.length === 10;
  const parsed = ISO_8601.test(value.trim())
    ? new Date(hasZone ? value.trim() : `${value.trim()}Z`)
    : new Date(Number.NaN);
  if (Number.isNaN(parsed.getTime())) {
    throw new AppError(
      "validation_failed",
      `${field}: "${value}" is not an ISO 8601 date-time such as 2026-11-21T09:00:00Z`,
    );
  }
  return parsed;
}

export function reportWindow(query: ReportQuery, now = new Date()): Window {
  const end = parseDate("end_date", query.endDate, now);
  const start = parseDate("start_date", query.startDate, new Date(end.getTime() - WEEK_MS));
  if (start > end) throw new AppError("validation_failed", "start_date: must not be after end_date");
  const rooms = [...new Set((query.roomNames ?? []).map((name) => (name.trim() === "" ? "" : roomKey(name.trim()))))];
  rooms.forEach((name, index) => {
    if (name === "") throw new AppError("validation_failed", `room_name.${index}: must not be empty`);
  });
  return { start, end, rooms };
}

export interface Window {
  start: Date;
  end: Date;
  rooms: string[];
}
