/**
 * The wire types of Jitsi's event_sync deliveries (jitsi-contrib mod_event_sync_component),
 * declared once: the routes validate with them and the log and the catalogue type with them.
 */
import { type Static, t } from "elysia";
import { Text } from "../../http/text";

const UnixSeconds = (description: string) =>
  t.Number({ minimum: 0, description: `${description} (unix time, seconds)` });

const Occupant = t.Object(
  {
    occupant_jid: Text({ minLength: 1, maxLength: 3071, description: "Full XMPP jid of the occupant's connection" }),
    joined_at: UnixSeconds("When the occupant joined"),
    left_at: t.Optional(UnixSeconds("When the occupant left")),
    name: t.Optional(Text({ maxLength: 1024, description: "From the JWT user context, when token auth is used" })),
    email: t.Optional(Text({ maxLength: 1024 })),
    id: t.Optional(
      t.Union([Text({ maxLength: 1024 }), t.Number()], { description: "User id from the JWT user context" }),
    ),
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

export const ConferenceLogModel = {
  /** Any of the four deliveries: what the log stores and the catalogue reads. */
  delivery: t.Object(
    {
      event_name: t.String(),
      ...roomFields,
      created_at: t.Optional(UnixSeconds("When the room was created")),
      destroyed_at: t.Optional(UnixSeconds("When the room was destroyed")),
      active_occupants_count: t.Optional(t.Integer({ minimum: 0 })),
      occupant: t.Optional(Occupant),
      all_occupants: t.Optional(t.Union([t.Array(Occupant), t.Record(t.String(), Occupant)])),
    },
    { additionalProperties: true },
  ),
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
      all_occupants: t.Optional(
        t.Union([t.Array(Occupant), t.Record(t.String(), Occupant)], {
          description: "Every occupant since the room was created",
        }),
      ),
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
      // Occupant's optional left_at left out first: composing both would make it an allOf of the two.
      occupant: t.Composite(
        [t.Omit(Occupant, ["left_at"]), t.Object({ left_at: UnixSeconds("When the occupant left") })],
        {
          additionalProperties: true,
        },
      ),
    },
    { additionalProperties: true },
  ),
  accepted: t.Object({
    stored: t.Boolean({ description: "false when the same delivery was stored before (a retry); it is counted once" }),
  }),
};

export type EventSyncOccupant = Static<typeof Occupant>;
/** One event_sync delivery body; the module may add room attributes and user context fields. */
export type EventSyncBody = Static<typeof ConferenceLogModel.delivery>;
