/**
 * The public event catalogue, declared once: the features type the data they record from
 * these models, and OpenAPI documents them. Version 1 of the catalogue: fields may be added
 * to an event's data, never removed or changed in meaning.
 */
import { type Static, t } from "elysia";
import { Cursor } from "../../http/cursor";
import { EVENT_TYPES, type EventType } from "./event-types";

export { EVENT_TYPES, type EventType };

const Room = t.String({ description: "The room name, lowercased as Jitsi uses it" });
const Time = (description: string) => t.String({ format: "date-time", description });
const Breakout = t.String({ description: "The breakout room's id, or empty for the main room" });

const Participant = t.Object({
  occupant_jid: t.String({ description: "Full XMPP jid of the occupant's connection" }),
  id: t.Union([t.String(), t.Null()], { description: "User id from the JWT user context" }),
  name: t.Union([t.String(), t.Null()]),
  email: t.Union([t.String(), t.Null()]),
});

const Stream = {
  stream_id: t.String({ description: "The stream's id" }),
  stream_name: t.String({ description: "The stream's public name (its URLs end with it)" }),
  room: Room,
};

const Call = {
  call_id: t.String({ description: "The SIP Call-ID" }),
  room: Room,
  caller: t.Union([t.String(), t.Null()], { description: "The caller's SIP URI" }),
  callee: t.Union([t.String(), t.Null()], { description: "The called SIP URI" }),
};

/** A webhook endpoint's breaker or state changed: which endpoint, and why. */
const EndpointChange = (reason: string) =>
  t.Object({ endpoint_id: t.String(), url: t.String(), reason: t.String({ description: reason }) });

/** The data of each event type. */
export const EVENT_DATA = {
  "room.started": t.Object({ room: Room, breakout_id: Breakout, started_at: Time("When the room was created") }),
  "room.ended": t.Object({
    room: Room,
    breakout_id: Breakout,
    started_at: Time("When the room was created"),
    ended_at: Time("When the room was destroyed"),
    duration_seconds: t.Integer({ description: "How long the room lived" }),
    minutes: t.Integer({ description: "The meeting's length in minutes, rounded up" }),
    participant_minutes: t.Integer({ description: "usage.participant_minutes rounded up to a whole minute" }),
    participants: t.Integer({ description: "Participants the room had over its life: usage.distinct_participants" }),
    meeting_id: t.String({ description: "The meeting, as the usage report's room_details.MeetingId names it" }),
    usage: t.Object(
      {
        participant_minutes: t.Number({ description: "Sum of the meeting's stays, in minutes with two decimals" }),
        phone_minutes: t.Number({ description: "Phone talk time, in minutes with two decimals" }),
        streaming_minutes: t.Number({ description: "Live streaming time, in minutes with two decimals" }),
        recording_minutes: t.Number({ description: "Recording time, in minutes with two decimals" }),
        peak_participants: t.Integer({ description: "Most participants present at once" }),
        distinct_participants: t.Integer({
          description: "Different people (by user id, else e-mail, else connection jid)",
        }),
        peak_viewers: t.Integer({ description: "Most viewers of a live stream of the room at once" }),
      },
      {
        description:
          "The usage report's media_usage figures for this meeting " +
          "when its end was folded: the same stays, the same computation",
      },
    ),
  }),
  "participant.joined": t.Object({
    room: Room,
    breakout_id: Breakout,
    participant: Participant,
    joined_at: Time("When the participant joined"),
  }),
  "participant.left": t.Object({
    room: Room,
    breakout_id: Breakout,
    participant: Participant,
    joined_at: Time("When the participant joined"),
    left_at: Time("When the participant left"),
    minutes: t.Integer({ description: "Length of the stay in minutes, rounded up" }),
  }),
  "conference.started": t.Object({
    conference_id: t.Integer(),
    room: Room,
    mail_owner: t.String({ description: "Who opened the room (bare JID)" }),
    start_time: t.String(),
    duration: t.Integer({ description: "Seconds the conference may last" }),
    reservation_id: t.Union([t.Integer(), t.Null()]),
  }),
  "conference.ended": t.Object({ conference_id: t.Integer(), room: Room, ended_at: Time("When the conference ended") }),
  "reservation.created": t.Object({
    reservation_id: t.Integer(),
    room: Room,
    mail_owner: t.String(),
    start_time: t.String({ description: "As given, local to timezone" }),
    duration: t.Number({ description: "Minutes" }),
    timezone: t.String(),
  }),
  "reservation.deleted": t.Object({ reservation_id: t.Integer(), room: Room }),
  "stream.queued": t.Object({
    ...Stream,
    position: t.Integer({ description: "Its place in the queue when it was queued, 1 first" }),
  }),
  "stream.started": t.Object({ ...Stream, recording: t.Boolean({ description: "Whether the stream is recorded" }) }),
  "stream.failed": t.Object({
    ...Stream,
    reason: t.String({ description: "The named reason, such as recorder_failed or timeout" }),
  }),
  "stream.stopped": t.Object({
    ...Stream,
    reason: t.String({ description: "Why it stopped: requested, timeout, ..." }),
  }),
  "recording.ready": t.Object({
    ...Stream,
    object_key: t.String({ description: "The recording's key in the S3 bucket" }),
    vod_url: t.String({
      description:
        "Where the recording plays (GET redirects to the file); empty unless the stream was started with is_vod",
    }),
  }),
  "call.started": t.Object({ ...Call, started_at: Time("When the call was answered") }),
  "call.ended": t.Object({
    ...Call,
    ended_at: Time("When the call ended"),
    answered: t.Boolean(),
    duration_seconds: t.Integer({ description: "From answer to hang-up; 0 for an unanswered call" }),
    reason: t.Union([t.String(), t.Null()]),
  }),
  "usage.day_settled": t.Object({
    day: t.String({ format: "date", description: "The UTC day" }),
    room: Room,
    participant_seconds: t.Integer(),
    peak_participants: t.Integer(),
    phone_seconds: t.Integer(),
    streaming_seconds: t.Integer(),
    recording_seconds: t.Integer(),
  }),
  "endpoint.circuit_opened": EndpointChange("Why: the failures in the window, or the probe that failed"),
  "endpoint.circuit_closed": EndpointChange("Why: the probe that succeeded"),
  "endpoint.disabled": EndpointChange("Why Parley disabled it: 410 Gone, or every attempt failing too long"),
  // Exactly the names in ./event-types.ts: a type missing here or not listed there fails to compile.
} as const satisfies Record<EventType, unknown>;
export type EventData<T extends EventType> = Static<(typeof EVENT_DATA)[T]>;

const envelope = {
  id: t.String({ description: "Unique id (evt_…); the webhook-id of its deliveries, so receivers de-duplicate by it" }),
  account_id: t.String(),
  created_at: Time("When the change it describes was committed"),
  sequence: t.Integer({
    description: "Strictly increasing per account; the cursor of the event log and Last-Event-ID of the stream",
  }),
};

/** One catalogue event: the body of a webhook and an item of the event log. */
export const EventModel = t.Union(
  EVENT_TYPES.map((type) => t.Object({ ...envelope, type: t.Literal(type), data: EVENT_DATA[type] }, { title: type })),
  { description: "A catalogue event" },
);

export type PublicEvent = Static<typeof EventModel>;

/** The event log's wire types (GET /api/v1/events). */
export const CatalogueModel = {
  eventPage: t.Object({
    events: t.Array(EventModel),
    next_after: t.Integer({
      description: "Pass as `after` for the next page; the same value when nothing newer exists yet",
    }),
  }),
  eventQuery: t.Object({
    after: t.Optional(
      Cursor({
        description: "Sequence number: only later events are listed (0, the default, lists from the oldest kept)",
      }),
    ),
    types: t.Optional(t.String({ description: "Comma-separated event types to list (default every type)" })),
    limit: t.Optional(t.Integer({ minimum: 1, maximum: 1000, default: 100 })),
  }),
};
