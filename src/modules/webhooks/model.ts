/**
 * The public event catalogue and the webhook wire types, declared once: the services type
 * their data from these models, and OpenAPI documents them. Version 1 of the catalogue:
 * fields may be added to an event's data, never removed or changed in meaning.
 */
import { type Static, t } from "elysia";
import { Cursor } from "../../http/cursor";
import { Name } from "../../http/text";
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

const EventTypeList = t.Array(t.UnionEnum(EVENT_TYPES as [EventType, ...EventType[]]), {
  description: "Event types sent to the endpoint; omitted or null means every type",
  uniqueItems: true,
});

/** The per-endpoint limits, each null for none; they hold across every worker and node. */
const limits = {
  rate_per_second: t.Union([t.Number({ exclusiveMinimum: 0, maximum: 10_000 }), t.Null()], {
    description: "Deliveries a second at most; held back deliveries stay due and use up no attempt",
  }),
  rate_burst: t.Union([t.Integer({ minimum: 1, maximum: 10_000 }), t.Null()], {
    description: "How many may go at once after a quiet spell; null is rate_per_second rounded up",
  }),
  max_in_flight: t.Union([t.Integer({ minimum: 1, maximum: 1_000 }), t.Null()], {
    description: "Attempts in flight at most (1 sends one at a time)",
  }),
};

const Endpoint = t.Object({
  id: t.String(),
  url: t.String(),
  event_types: t.Union([t.Array(t.String()), t.Null()]),
  description: t.String(),
  enabled: t.Boolean(),
  ordered: t.Boolean(),
  ...limits,
  disabled_reason: t.Union([t.String(), t.Null()], {
    description: "Why Parley disabled it (410 Gone, failing for 24 hours)",
  }),
  failing_since: t.Union([Time("Start of the current run of failed attempts"), t.Null()]),
  circuit_open_until: t.Union([
    Time("While its circuit breaker is open: when the cool-down before a probe ends"),
    t.Null(),
  ]),
  created_at: Time("When it was made"),
  updated_at: Time("When it last changed"),
  health: t.Optional(
    t.Object(
      {
        state: t.UnionEnum(["healthy", "throttled", "circuit_open", "paused", "disabled"], {
          description:
            "disabled by Parley (see disabled_reason), paused by the account, or sending " +
            "(throttled: due deliveries held back by its limits)",
        }),
        recent: t.Integer({ description: "How many of its latest deliveries (up to 100) the figures below are of" }),
        success_rate: t.Union([t.Number(), t.Null()], {
          description: "Of those, the share whose last attempt succeeded",
        }),
        latency_p50_ms: t.Union([t.Integer(), t.Null()], { description: "Their last attempts' latency, median" }),
        latency_p99_ms: t.Union([t.Integer(), t.Null()], {
          description: "Their last attempts' latency, 99th percentile",
        }),
        backlog: t.Integer({ description: "Deliveries left to send, set aside ones included" }),
      },
      { description: "GET /api/v1/webhooks/{id} only" },
    ),
  ),
});

export const WebhooksModel = {
  endpoint: Endpoint,
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
  endpointCreate: t.Object({
    url: t.String({ minLength: 1, maxLength: 2048, description: "http or https URL that receives the POSTs" }),
    event_types: t.Optional(t.Union([EventTypeList, t.Null()])),
    description: t.Optional(Name({ maxLength: 1024 })),
    enabled: t.Optional(t.Boolean({ default: true })),
    ordered: t.Optional(t.Boolean({ default: false, description: "Deliver one event at a time, in sequence order" })),
    rate_per_second: t.Optional(limits.rate_per_second),
    rate_burst: t.Optional(limits.rate_burst),
    max_in_flight: t.Optional(limits.max_in_flight),
  }),
  endpointUpdate: t.Object({
    url: t.Optional(t.String({ minLength: 1, maxLength: 2048 })),
    event_types: t.Optional(t.Union([EventTypeList, t.Null()])),
    description: t.Optional(Name({ maxLength: 1024 })),
    enabled: t.Optional(
      t.Boolean({ description: "true re-enables an endpoint Parley disabled, and its pending deliveries resume" }),
    ),
    ordered: t.Optional(t.Boolean()),
    rate_per_second: t.Optional(limits.rate_per_second),
    rate_burst: t.Optional(limits.rate_burst),
    max_in_flight: t.Optional(limits.max_in_flight),
  }),
  endpointWithSecret: t.Object({
    endpoint: Endpoint,
    secret: t.String({ description: "The whsec_ signing secret, shown only now" }),
  }),
  delivery: t.Object({
    id: t.Integer(),
    event_id: t.String(),
    event_type: t.String(),
    sequence: t.Integer(),
    status: t.UnionEnum(["pending", "succeeded", "failed"]),
    attempts: t.Integer({ description: "Attempts made so far" }),
    last_attempt_at: t.Union([Time("When the last attempt was made"), t.Null()]),
    status_code: t.Union([t.Integer(), t.Null()], {
      description: "HTTP status of the last answer; null when none came",
    }),
    latency_ms: t.Union([t.Integer(), t.Null()]),
    response: t.Union([t.String(), t.Null()], {
      description: "First kilobyte of the last answer, or why there was none",
    }),
    next_attempt_at: t.Union([Time("When it is tried next"), t.Null()]),
  }),
  deliveryQuery: t.Object({
    before: t.Optional(Cursor({ minimum: 1, description: "Delivery id: only older deliveries are listed" })),
    status: t.Optional(
      t.Union([t.Literal("pending"), t.Literal("succeeded"), t.Literal("failed")], {
        description: "Only deliveries in this state",
      }),
    ),
    limit: t.Optional(t.Integer({ minimum: 1, maximum: 1000, default: 100 })),
  }),
  replay: t.Object({
    since: t.Optional(
      t.String({ format: "date-time", description: "Replay every kept event created at or after this time" }),
    ),
    after: t.Optional(Cursor({ description: "Replay every kept event with a larger sequence number" })),
  }),
  replayed: t.Object({ queued: t.Integer({ description: "Deliveries queued" }) }),
};

export type EndpointCreate = Static<typeof WebhooksModel.endpointCreate>;
export type EndpointUpdate = Static<typeof WebhooksModel.endpointUpdate>;
export type Endpoint = Static<typeof WebhooksModel.endpoint>;
export type Delivery = Static<typeof WebhooksModel.delivery>;
