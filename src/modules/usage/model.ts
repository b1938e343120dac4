/**
 * The usage report's wire types, declared once: the route validates and documents with these
 * models, and the report is built as their static types.
 */
import { type Static, t } from "elysia";
import { Text } from "../../http/text";

const Minutes = (description: string) =>
  t.Number({ minimum: 0, description: `${description}, in minutes with two decimals` });
const Instant = (description: string) =>
  t.String({ format: "date-time", description: `${description} (ISO 8601, UTC)` });
const OptionalInstant = (description: string) =>
  t.Union([Instant(description), t.Null()], { description: `${description}; null while it lasts` });

const User = t.Object({
  user_id: t.Union([t.String(), t.Null()], {
    description: "User id from the Jitsi token's user context; null for guests",
  }),
  name: t.Union([t.String(), t.Null()], { description: "Display name from the token's user context" }),
  email: t.Union([t.String(), t.Null()], { description: "E-mail from the token's user context" }),
  occupant_jid: t.String({ description: "Full XMPP jid of the connection that stayed in the room" }),
  joined_at: Instant("When the participant joined"),
  left_at: OptionalInstant("When the participant left; null while the stay is open at as_of"),
  left_estimated: t.Boolean({ description: "True when no leave was reported and left_at is the room's end" }),
  minutes: Minutes("Length of the stay; an open stay counts up to as_of"),
});

const Stream = t.Object({
  stream_name: t.String({ description: "Name of the live stream" }),
  kind: t.Union([t.Literal("streaming"), t.Literal("recording")], { description: "A live stream, or its recording" }),
  started_at: Instant("When it started"),
  ended_at: OptionalInstant("When it stopped"),
  minutes: Minutes("How long it ran; up to as_of while it runs"),
  peak_viewers: t.Integer({ minimum: 0, description: "Most viewers reported at once (streams; 0 for recordings)" }),
});

const Call = t.Object({
  call_id: t.String({ description: "SIP Call-ID" }),
  caller: t.Union([t.String(), t.Null()], { description: "Calling party" }),
  callee: t.Union([t.String(), t.Null()], { description: "Called number or address" }),
  answered: t.Boolean({ description: "Whether the gateway answered the call" }),
  reason: t.Union([t.String(), t.Null()], { description: "Why the call ended, as the gateway reported it" }),
  started_at: Instant("When the call was answered (when it ended, for an unanswered call)"),
  ended_at: OptionalInstant("When the call ended"),
  minutes: Minutes("Talk time (up to as_of while the call lasts); 0 for an unanswered call"),
});

const MediaUsage = t.Object(
  {
    participant_minutes: Minutes(
      "Sum of the meeting's stays, each from join to leave; an open stay counts up to as_of",
    ),
    phone_minutes: Minutes("Talk time of phone calls into the room"),
    streaming_minutes: Minutes("Time the room was streamed live"),
    recording_minutes: Minutes("Time the room was recorded"),
    peak_participants: t.Integer({ minimum: 0, description: "Most participants present at once" }),
    distinct_participants: t.Integer({
      minimum: 0,
      description: "Different people (by user id, else e-mail, else connection jid)",
    }),
    peak_viewers: t.Integer({ minimum: 0, description: "Most viewers of a live stream of the room at once" }),
    streams: t.Array(Stream, { description: "Live streams and recordings that started during this meeting" }),
    calls: t.Array(Call, { description: "Phone calls that started during this meeting" }),
  },
  { description: "Parley's totals for this meeting, with its streams and calls" },
);

const Room = t.Object({
  room_id: t.String({
    description:
      "The room key (as jitsi-meet names the room: `design%20review`); room_name filters on it, in any spelling",
  }),
  room_details: t.Object(
    {
      OwnerId: t.String({ description: "Parley account that owns the room" }),
      AppId: t.Union([t.String(), t.Null()], {
        description: "XMPP conference domain the room lives on (from room_jid); null when unknown",
      }),
      MeetingId: t.String({
        description: "This meeting: room[/breakout]@unix-seconds-of-creation, unique per account",
      }),
    },
    { description: "Who owns the room and which meeting this is" },
  ),
  room_type: t.Union([t.Literal("conference"), t.Literal("breakout")], {
    description: "A main room, or a breakout room of room_id",
  }),
  status: t.Union([t.Literal("active"), t.Literal("inactive")], {
    description: "active while the room exists, inactive once destroyed",
  }),
  inferred: t.Boolean({
    description:
      "True when Parley never heard the room's create or destroy " +
      "and built the meeting from its participants and media alone",
  }),
  StartedAt: Instant("When the room was created"),
  EndedAt: OptionalInstant("When the room was destroyed"),
  CreatedAt: Instant("When Parley first recorded this meeting"),
  UpdatedAt: Instant("When Parley last changed this meeting's record"),
  users: t.Array(User, { description: "Every stay of a participant in the meeting, in join order" }),
  media_usage: MediaUsage,
});

const Day = t.Object({
  room_name: t.String({ description: "Room name" }),
  date: t.String({ format: "date", description: "UTC day" }),
  participant_minutes: Minutes(
    "The listed meetings' participant time inside the day (stays " +
      "crossing midnight are split; an open stay counts up to as_of)",
  ),
  peak_participants: t.Integer({
    minimum: 0,
    description: "Most participants present at once that day, breakout rooms included",
  }),
  distinct_participants: t.Integer({ minimum: 0, description: "Different people present that day" }),
  phone_minutes: Minutes("Phone talk time inside the day"),
  streaming_minutes: Minutes("Live streaming time inside the day"),
  recording_minutes: Minutes("Recording time inside the day"),
  peak_viewers: t.Integer({ minimum: 0, description: "Highest peak of a live stream running that day" }),
});

export const UsageModel = {
  request: t.Object({
    room_name: t.Optional(
      t.Array(Text({ maxLength: 1024 }), {
        maxItems: 10_000,
        description: "Rooms to report; absent or empty for every room of the account",
      }),
    ),
    start_date: t.Optional(
      Text({
        maxLength: 64,
        description: "ISO 8601 date-time (a bare date is midnight UTC); default 7 days before end_date",
      }),
    ),
    end_date: t.Optional(Text({ maxLength: 64, description: "ISO 8601 date-time; default now" })),
  }),
  report: t.Object({
    start_date: Instant("Start of the window: meetings that started at or after it are listed"),
    end_date: Instant("End of the window: meetings that started at or before it are listed"),
    as_of: Instant(
      "The instant the report is complete to: every event acknowledged before " +
        "it is counted, and a stay, stream or call still open counts up to it",
    ),
    rooms: t.Array(Room, {
      description: "One entry per meeting (life of a room) that started in the window, oldest first",
    }),
    days: t.Array(Day, {
      description:
        "The listed meetings' usage per room name and UTC day they ran on " +
        "(breakout rooms in their main room); the days add up to the totals",
    }),
    totals: t.Object(
      {
        rooms: t.Integer({ minimum: 0, description: "Number of entries in rooms" }),
        participant_minutes: Minutes("Sum over rooms: every stay of the listed meetings, an open stay up to as_of"),
        phone_minutes: Minutes("Sum over rooms"),
        streaming_minutes: Minutes("Sum over rooms"),
        recording_minutes: Minutes("Sum over rooms"),
        peak_participants: t.Integer({ minimum: 0, description: "Largest peak of any one room" }),
        distinct_participants: t.Integer({ minimum: 0, description: "Different people across all rooms" }),
        open_stays: t.Integer({ minimum: 0, description: "Stays still open at as_of, counted up to it" }),
      },
      { description: "Totals of the listed rooms" },
    ),
  }),
  csv: t.String({ description: "With Accept: text/csv: the report as CSV, one line per participant stay" }),
};

export type ReportUser = Static<typeof User>;
export type ReportStream = Static<typeof Stream>;
export type ReportCall = Static<typeof Call>;
export type ReportRoom = Static<typeof Room>;
export type ReportDay = Static<typeof Day>;
export type UsageReport = Static<typeof UsageModel.report>;
export type ReportTotals = UsageReport["totals"];
