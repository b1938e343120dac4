/**
 * Ingestion of Jitsi's event_sync Prosody module (jitsi-contrib/prosody-plugins), unchanged:
 * set its `api_prefix` to `<Parley>/api/v1` and its `api_headers` to
 * `{ ["Authorization"] = "Bearer <API key>" }`.
 */
import { Elysia, t } from "elysia";
import { auth } from "../auth";
import { errorResponses } from "../../http/errors";
import { limits } from "../limits";
import { Text } from "../../http/text";
import type { EventSyncBody } from "./event-sync";
import { recordEventSync } from "./service";

const UnixSeconds = (description: string) => t.Number({ minimum: 0, description: `${description} (unix time, seconds)` });

const Occupant = t.Object(
  {
    occupant_jid: Text({ minLength: 1, maxLength: 3071, description: "Full XMPP jid of the occupant's connection" }),
    joined_at: UnixSeconds("When the occupant joined"),
    left_at: t.Optional(UnixSeconds("When the occupant left")),
    name: t.Optional(Text({ maxLength: 1024, description: "From the JWT user context, when token auth is used" })),
    email: t.Optional(Text({ maxLength: 1024 })),
    id: t.Optional(t.Union([Text({ maxLength: 1024 }), t.Number()], { description: "User id from the JWT user context" })),
    total_dominant_speaker_time: t.Optional(t.Number({ description: "Milliseconds, with include_speaker_stats" })),
  },
  { additionalProperties: true },
);

const roomFields = {
  room_name: Text({ minLength: 1, maxLength: 1024, description: "Room name (the main room's, for a breakout room)" }),
  room_jid: t.Optional(Text({ maxLength: 3071 })),
  is_breakout: t.Optional(t.Boolean()),
  breakout_room_id: t.Optional(Text({ maxLength: 1024, description: "Present when is_breakout is true" })),
};

export const EventsModel = {
  roomCreated: t.Object(
    { event_name: t.Literal("muc-room-created"), ...roomFields, created_at: UnixSeconds("When the room was created") },
    { additionalProperties: true },
  ),
  roomDestroyed: t.Object(
    {
      event_name: t.Literal("muc-room-destroyed"),
      ...roomFields,
      created_at: UnixSeconds("When the room was created"),
      destroyed_at: UnixSeconds("When the room was destroyed"),
      // Prosody's JSON encoder writes an empty Lua table as {}, so an empty list may come as an object.
      all_occupants: t.Optional(t.Union([t.Array(Occupant), t.Record(t.String(), Occupant)], { description: "Every occupant since the room was created" })),
    },
    { additionalProperties: true },
  ),
  occupantJoined: t.Object(
    {
      event_name: t.Literal("muc-occupant-joined"),
      ...roomFields,
      active_occupants_count: t.Optional(t.Integer({ minimum: 0 })),
      occupant: Occupant,
    },
    { additionalProperties: true },
  ),
  occupantLeft: t.Object(
    {
      event_name: t.Literal("muc-occupant-left"),
      ...roomFields,
      active_occupants_count: t.Optional(t.Integer({ minimum: 0 })),
      occupant: t.Composite([Occupant, t.Object({ left_at: UnixSeconds("When the occupant left") })], { additionalProperties: true }),
    },
    { additionalProperties: true },
  ),
  accepted: t.Object({
    stored: t.Boolean({ description: "false when the same delivery was stored before (a retry); it is counted once" }),
  }),
};

const accepted = { 200: EventsModel.accepted, ...errorResponses(400, 401, 422) };

export const eventsController = new Elysia({ name: "parley.events", prefix: "/api/v1/events", detail: { tags: ["events"] } })
  .use(auth)
  .use(limits)
  .post("/room/created", async ({ account, body }) => ({ stored: await recordEventSync(account.id, "room_created", body as EventSyncBody) }), {
    apiKey: true,
    limit: "events",
    body: EventsModel.roomCreated,
    response: accepted,
    detail: { summary: "event_sync muc-room-created: a conference room was created" },
  })
  .post("/room/destroyed", async ({ account, body }) => ({ stored: await recordEventSync(account.id, "room_destroyed", body as EventSyncBody) }), {
    apiKey: true,
    limit: "events",
    body: EventsModel.roomDestroyed,
    response: accepted,
    detail: { summary: "event_sync muc-room-destroyed: a room ended, listing every occupant it had" },
  })
  .post("/occupant/joined", async ({ account, body }) => ({ stored: await recordEventSync(account.id, "occupant_joined", body as EventSyncBody) }), {
    apiKey: true,
    limit: "events",
    body: EventsModel.occupantJoined,
    response: accepted,
    detail: { summary: "event_sync muc-occupant-joined: someone joined a room" },
  })
  .post("/occupant/left", async ({ account, body }) => ({ stored: await recordEventSync(account.id, "occupant_left", body as EventSyncBody) }), {
    apiKey: true,
    limit: "events",
    body: EventsModel.occupantLeft,
    response: accepted,
    detail: { summary: "event_sync muc-occupant-left: someone left a room" },
  });
