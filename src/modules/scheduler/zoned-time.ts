/**
 * Reservation times: wall-clock times in an IANA zone read as instants, ISO 8601 texts
 * checked against the calendar, and the date form Jicofo and Prosody exchange.
 */
import { invalid } from "./validation";

const DEFAULT_TIMEZONE = "America/New_York";

const formatters = new Map<string, Intl.DateTimeFormat>();

/** A formatter for the zone, or undefined when the zone is not an IANA name the runtime knows. */
function zoneFormatter(zone: string): Intl.DateTimeFormat | undefined {
  let formatter = formatters.get(zone);
  if (!formatter) {
    try {
      formatter = new Intl.DateTimeFormat("en-US", {
        timeZone: zone,
        hourCycle: "h23",
        year: "numeric",
        month: "2-digit",
        day: "2-digit",
        hour: "2-digit",
        minute: "2-digit",
        second: "2-digit",
      });
    } catch {
      return undefined;
    }
    formatters.set(zone, formatter);
  }
  return formatter;
}

/** The zone's offset from UTC at an instant, in milliseconds. */
function zoneOffset(formatter: Intl.DateTimeFormat, instant: number): number {
  const parts = Object.fromEntries(formatter.formatToParts(instant).map((part) => [part.type, part.value]));
  const wall = Date.UTC(
    Number(parts.year),
    Number(parts.month) - 1,
    Number(parts.day),
    Number(parts.hour),
    Number(parts.minute),
    Number(parts.second),
  );
  return wall - Math.floor(instant / 1000) * 1000;
}

const DAY_MS = 86_400_000;

/**
 * Wall-clock fields read in a zone, as an instant. Zones change offset at most once a day,
 * so the offsets a day before and a day after are the only candidates. A time that happens
 * twice (clocks go back) is its first occurrence; one that never happens (clocks go
 * forward) is read with the earlier offset, which moves it on by the time skipped.
 */
function zonedInstant(fields: number[], formatter: Intl.DateTimeFormat): number {
  const [year, month, day, hour, minute, second, millis] = fields as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const wall = Date.UTC(year, month - 1, day, hour, minute, second, millis);
  const before = wall - zoneOffset(formatter, wall - DAY_MS);
  const after = wall - zoneOffset(formatter, wall + DAY_MS);
  const fitting = [before, after].filter((instant) => instant + zoneOffset(formatter, instant) === wall);
  return fitting.length > 0 ? Math.min(...fitting) : before;
}

const LOCAL_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,3}))?)?(Z|[+-]\d{2}:?\d{2})?$/;

/** Date and time fields of an ISO 8601 text, checked against the calendar; the offset in minutes when one is given. */
export function parseIsoFields(text: string): { fields: number[]; offsetMinutes?: number } | undefined {
  const match = LOCAL_TIME.exec(text.trim());
  if (!match) return undefined;
  const fields = [1, 2, 3, 4, 5, 6].map((i) => Number(match[i] ?? 0));
  fields.push(Number((match[7] ?? "0").padEnd(3, "0")));
  const [year, month, day, hour, minute, second] = fields as [number, number, number, number, number, number];
  const check = new Date(Date.UTC(year, month - 1, day, hour, minute, second));
  if (
    check.getUTCFullYear() !== year ||
    check.getUTCMonth() !== month - 1 ||
    check.getUTCDate() !== day ||
    check.getUTCHours() !== hour ||
    check.getUTCMinutes() !== minute ||
    check.getUTCSeconds() !== second
  ) {
    return undefined;
  }
  const zone = match[8];
  if (zone === undefined) return { fields };
  if (zone === "Z") return { fields, offsetMinutes: 0 };
  const digits = zone.replace(":", "");
  const sign = digits.startsWith("-") ? -1 : 1;
  const hours = Number(digits.slice(1, 3));
  const minutes = Number(digits.slice(3, 5));
  if (hours > 23 || minutes > 59) return undefined;
  return { fields, offsetMinutes: sign * (hours * 60 + minutes) };
}

export function fieldsAtOffset(fields: number[], offsetMinutes: number): number {
  const [year, month, day, hour, minute, second, millis] = fields as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  return Date.UTC(year, month - 1, day, hour, minute, second, millis) - offsetMinutes * 60_000;
}

/** The instant a reservation's start_time means in its time zone. */
export function reservationStart(
  startTime: string,
  timezone: string | undefined,
): { startsAt: Date; timezone: string } {
  const givenZone = timezone?.trim() || DEFAULT_TIMEZONE;
  // The spec spells the default "America/New York"; IANA names use `_` for spaces.
  const formatter = zoneFormatter(givenZone.replace(/ /g, "_"));
  if (!formatter) throw invalid("timezone", `"${timezone}" is not an IANA time zone name such as America/New_York`);
  const parsed = parseIsoFields(startTime);
  if (!parsed) throw invalid("start_time", `a date and time YYYY-MM-DDTHH:MM (seconds allowed), got "${startTime}"`);
  if (parsed.offsetMinutes === undefined)
    return {
      startsAt: new Date(zonedInstant(parsed.fields, formatter)),
      timezone: timezone?.trim() ? timezone : DEFAULT_TIMEZONE,
    };
  // An offset in start_time is what the time is read with, so with
  // no zone given that offset is the answer, not the default zone.
  return {
    startsAt: new Date(fieldsAtOffset(parsed.fields, parsed.offsetMinutes)),
    timezone: timezone?.trim() ? timezone : offsetName(parsed.offsetMinutes),
  };
}

/** An offset as a zone name: `UTC`, or `+05:30` / `-03:00`, which Intl reads as a fixed-offset zone. */
function offsetName(minutes: number): string {
  if (minutes === 0) return "UTC";
  const size = Math.abs(minutes);
  const twoDigits = (value: number) => String(value).padStart(2, "0");
  return `${minutes < 0 ? "-" : "+"}${twoDigits(Math.floor(size / 60))}:${twoDigits(size % 60)}`;
}

/** Jicofo's date form, `yyyy-MM-dd'T'HH:mm:ss.SSS` in UTC with a `Z`, which Prosody's datetime.parse reads. */
export function jicofoDate(instant: Date): string {
  return `${instant.toISOString().slice(0, 23)}Z`;
}
