/**
 * The meetings of a usage report. A room entry is one life of a room (created to destroyed)
 * that started inside the window, with the stays, streams, recordings and calls that began
 * during it; a room's record belongs to the window its start falls in, so back-to-back
 * windows never count a meeting twice.
 *
 * What a report says of each meeting, its entry and its figures, is here; reading the lives is
 * meeting-lives.ts.
 */
import type { ReportCall, ReportRoom, ReportStream, ReportUser } from "./model";
import { type Life, meetingLives, type PreparedReport, type Stay } from "./meeting-lives";

/** Minutes with two decimals, from whole seconds. */
export const minutes = (seconds: number) => Math.round((seconds / 60) * 100) / 100;
const iso = (date: Date | null) => (date === null ? null : date.toISOString());
const unix = (date: Date) => Math.floor(date.getTime() / 1000);

/** Whole seconds from one instant to another, or to `asOf` while it lasts. */
function secondsBetween(from: Date, to: Date | null, asOf: Date): number {
  return msSecondsBetween(from.getTime(), to?.getTime() ?? null, asOf);
}

function msSecondsBetween(from: number, to: number | null, asOf: Date): number {
  return Math.max(0, Math.round(((to ?? asOf.getTime()) - from) / 1000));
}

/** Most people present at once; at one instant leaves count before joins. */
function peakPresence(stays: Stay[], asOf: Date): number {
  const joins = new Float64Array(stays.length);
  const leaves = new Float64Array(stays.length);
  stays.forEach((stay, index) => {
    joins[index] = stay.joinedMs;
    leaves[index] = Math.max(joins[index]!, stay.leftMs ?? asOf.getTime());
  });
  return peakOf(joins, leaves);
}

/**
 * Most intervals open at once, from their starts and ends (sorted here); at one instant ends
 * count before starts, so a hand-over is not an overlap. Two sorted lists merged: a meeting
 * of thousands of stays allocates no pair per stay.
 */
export function peakOf(joins: Float64Array, leaves: Float64Array): number {
  joins.sort();
  leaves.sort();
  let present = 0;
  let peak = 0;
  for (let j = 0, l = 0; j < joins.length; ) {
    if (leaves[l]! <= joins[j]!) {
      present -= 1;
      l += 1;
    } else {
      present += 1;
      j += 1;
      peak = Math.max(peak, present);
    }
  }
  return peak;
}

function lastLeave(stays: Stay[]): Date | null {
  return stays.length === 0
    ? null
    : new Date(stays.reduce((latest, stay) => Math.max(latest, stay.leftMs!), Number.NEGATIVE_INFINITY));
}

export const personOf = (stay: Stay) => stay.userId ?? stay.email ?? stay.occupantJid;

export interface Seconds {
  participant: number;
  phone: number;
  streaming: number;
  recording: number;
}

/** A meeting's figures, without the lists of its users, streams and calls (room.ended carries these alone). */
export type MeetingFigures = Omit<ReportRoom["media_usage"], "streams" | "calls">;

/** A meeting's seconds for the totals and its figures, from its life's stays and media. */
export function meetingFigures(life: Life, asOf: Date): { seconds: Seconds; figures: MeetingFigures } {
  const participantSeconds = life.stays.reduce(
    (sum, stay) => sum + msSecondsBetween(stay.joinedMs, stay.leftMs, asOf),
    0,
  );
  const mediaSeconds = (kind: string) =>
    life.media
      .filter((media) => media.kind === kind)
      .reduce((sum, media) => sum + secondsBetween(media.startedAt, media.endedAt, asOf), 0);
  const seconds: Seconds = {
    participant: participantSeconds,
    phone: mediaSeconds("phone"),
    streaming: mediaSeconds("streaming"),
    recording: mediaSeconds("recording"),
  };
  const figures: MeetingFigures = {
    participant_minutes: minutes(seconds.participant),
    phone_minutes: minutes(seconds.phone),
    streaming_minutes: minutes(seconds.streaming),
    recording_minutes: minutes(seconds.recording),
    peak_participants: peakPresence(life.stays, asOf),
    distinct_participants: new Set(life.stays.map(personOf)).size,
    peak_viewers: Math.max(
      0,
      ...life.media.filter((media) => media.kind === "streaming").map((media) => media.peakViewers),
    ),
  };
  return { seconds, figures };
}

/** The meeting's id in the report: its room (and breakout) and the second it started. */
export const meetingId = (life: Life) =>
  `${life.room}${life.breakoutId ? `/${life.breakoutId}` : ""}@${unix(life.startedAt)}`;

function describeRoom(accountId: string, life: Life, asOf: Date): { room: ReportRoom; seconds: Seconds } {
  const users: ReportUser[] = life.stays
    .sort((a, b) => a.joinedMs - b.joinedMs || a.occupantJid.localeCompare(b.occupantJid))
    .map((stay) => ({
      user_id: stay.userId,
      name: stay.name,
      email: stay.email,
      occupant_jid: stay.occupantJid,
      joined_at: new Date(stay.joinedMs).toISOString(),
      left_at: stay.leftMs === null ? null : new Date(stay.leftMs).toISOString(),
      left_estimated: stay.leftEstimated,
      minutes: minutes(msSecondsBetween(stay.joinedMs, stay.leftMs, asOf)),
    }));
  const streams: ReportStream[] = life.media.flatMap((media) =>
    media.kind === "phone"
      ? []
      : [
          {
            stream_name: media.subject,
            kind: media.kind,
            started_at: media.startedAt.toISOString(),
            ended_at: iso(media.endedAt),
            minutes: minutes(secondsBetween(media.startedAt, media.endedAt, asOf)),
            peak_viewers: media.peakViewers,
          },
        ],
  );
  const calls: ReportCall[] = life.media
    .filter((media) => media.kind === "phone")
    .map((media) => ({
      call_id: media.subject,
      caller: media.details.caller ?? null,
      callee: media.details.callee ?? null,
      answered: media.details.answered === true,
      reason: media.details.reason ?? null,
      started_at: media.startedAt.toISOString(),
      ended_at: iso(media.endedAt),
      minutes: minutes(secondsBetween(media.startedAt, media.endedAt, asOf)),
    }));
  const open = life.id === null ? life.stays.some((stay) => stay.leftMs === null) : life.endedAt === null;
  const updatedAt = new Date(
    life.stays.reduce((latest, stay) => Math.max(latest, stay.updatedMs), life.updatedAt.getTime()),
  );
  const { seconds, figures } = meetingFigures(life, asOf);
  const room: ReportRoom = {
    room_id: life.room,
    room_details: { OwnerId: accountId, AppId: life.roomJid?.split("@")[1] ?? null, MeetingId: meetingId(life) },
    room_type: life.breakoutId ? "breakout" : "conference",
    status: open ? "active" : "inactive",
    inferred: life.id === null,
    StartedAt: life.startedAt.toISOString(),
    EndedAt: open ? null : iso(life.endedAt ?? lastLeave(life.stays)),
    CreatedAt: life.createdAt.toISOString(),
    UpdatedAt: updatedAt.toISOString(),
    users,
    media_usage: { ...figures, streams, calls },
  };
  return { room, seconds };
}

/** A meeting of the report: its entry, its seconds for the totals, and its life for the days. */
export interface Meeting {
  room: ReportRoom;
  seconds: Seconds;
  life: Life;
}

/** The meetings of a prepared report, oldest first, each with its seconds for the totals. */
export async function describeMeetings(prepared: PreparedReport): Promise<Meeting[]> {
  return (await meetingLives(prepared)).map((life) => ({
    ...describeRoom(prepared.accountId, life, prepared.asOf),
    life,
  }));
}
