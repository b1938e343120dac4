/**
 * The report's days: the listed meetings' own stays, streams and calls split at UTC midnight,
 * per room name (a breakout room's in its main room's). They are built from the same
 * meetings as `rooms` and `totals`, with open stays counted up to the same `as_of`, so the
 * days of a report add up to its totals.
 */
import type { Life } from "./meeting-lives";
import { type Meeting, minutes, peakOf, personOf } from "./meetings";
import type { ReportDay } from "./model";

const DAY_MS = 86_400_000;

interface DayTally {
  room: string;
  day: number;
  participant: number;
  phone: number;
  streaming: number;
  recording: number;
  starts: number[];
  ends: number[];
  people: Set<string>;
  peakViewers: number;
}

/**
 * Calls `add` for each UTC day [from, to) touches (the day of `from` alone when it is empty),
 * with the part inside the day and its whole seconds. The seconds are the differences of the
 * rounded seconds from `from` to each boundary, so the parts add up to the whole interval's
 * rounded seconds, as the meeting counts it.
 */
function splitByDay(
  from: number,
  to: number,
  add: (day: number, start: number, end: number, seconds: number) => void,
): void {
  const end = Math.max(from, to);
  let day = Math.floor(from / DAY_MS) * DAY_MS;
  let counted = 0;
  for (;;) {
    const next = day + DAY_MS;
    const pieceEnd = Math.min(end, next);
    const upTo = Math.round((pieceEnd - from) / 1000);
    add(day, Math.max(from, day), pieceEnd, upTo - counted);
    counted = upTo;
    if (end <= next) return;
    day = next;
  }
}

export function reportDays(meetings: Meeting[], asOf: Date): ReportDay[] {
  const tallies = new Map<string, DayTally>();
  const tally = (life: Life, day: number) => {
    const key = `${life.room}|${day}`;
    let found = tallies.get(key);
    if (!found) {
      found = {
        room: life.room,
        day,
        participant: 0,
        phone: 0,
        streaming: 0,
        recording: 0,
        starts: [],
        ends: [],
        people: new Set(),
        peakViewers: 0,
      };
      tallies.set(key, found);
    }
    return found;
  };
  for (const { life } of meetings) {
    for (const stay of life.stays) {
      splitByDay(stay.joinedMs, stay.leftMs ?? asOf.getTime(), (day, start, end, seconds) => {
        const row = tally(life, day);
        row.participant += seconds;
        row.starts.push(start);
        row.ends.push(end);
        row.people.add(personOf(stay));
      });
    }
    for (const media of life.media) {
      splitByDay(
        media.startedAt.getTime(),
        media.endedAt?.getTime() ?? asOf.getTime(),
        (day, _start, _end, seconds) => {
          const row = tally(life, day);
          row[media.kind] += seconds;
          if (media.kind === "streaming") row.peakViewers = Math.max(row.peakViewers, media.peakViewers);
        },
      );
    }
  }
  return [...tallies.values()]
    .sort((a, b) => a.day - b.day || (a.room < b.room ? -1 : a.room > b.room ? 1 : 0))
    .map((row) => ({
      room_name: row.room,
      date: new Date(row.day).toISOString().slice(0, 10),
      participant_minutes: minutes(row.participant),
      peak_participants: peakOf(Float64Array.from(row.starts), Float64Array.from(row.ends)),
      distinct_participants: row.people.size,
      phone_minutes: minutes(row.phone),
      streaming_minutes: minutes(row.streaming),
      recording_minutes: minutes(row.recording),
      peak_viewers: row.peakViewers,
    }));
}
