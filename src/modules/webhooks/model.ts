/**
 * The webhook wire types, declared once: the services type their data from these models, and
 * OpenAPI documents them. The events they deliver are the catalogue's (src/modules/catalogue).
 */
import { type Static, t } from "elysia";
import { Cursor } from "../../http/cursor";
import { Name } from "../../http/text";
import { EVENT_TYPES, type EventType } from "../catalogue";

const Time = (description: string) => t.String({ format: "date-time", description });

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
