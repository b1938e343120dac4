/**
 * The scheduler's wire types, declared once: the routes validate and document with these
 * models, and the services type what they take and return from them.
 */
import { t } from "elysia";
import { ErrorModel } from "../../http/errors";
import { Text } from "../../http/text";

const reservation = t.Object({
  id: t.Integer(),
  name: t.String({ description: "As given", examples: ["Design Review"] }),
  room_key: t.String({
    description: "The room as Jitsi names it (jitsi-meet's getBackendSafeRoomName)",
    examples: ["design%20review"],
  }),
  mail_owner: t.String({ examples: ["owner@example.com"] }),
  start_time: t.String({ description: "As given, local to timezone", examples: ["2030-01-15T10:00"] }),
  duration: t.Number({ description: "Minutes" }),
  timezone: t.String({
    description:
      "As given; when absent, the zone applied: UTC or the offset of a start_time that has one, else America/New_York",
  }),
  pin: t.Optional(t.String()),
});

const conference = t.Object({
  id: t.Integer(),
  name: t.String({ description: "The room (JID node) as Prosody sent it" }),
  mail_owner: t.String({ description: "The bare JID Prosody sent" }),
  start_time: t.String({
    description: "UTC, as Prosody sent it or the reservation's start",
    examples: ["2030-01-15T15:00:00.000Z"],
  }),
  duration: t.Number({ description: "Seconds (Jicofo's reservation contract)" }),
  timezone: t.Literal("UTC"),
  reservation_id: t.Nullable(t.Integer()),
  ended_at: t.Nullable(t.String({ description: "When the room was destroyed or its time ran out" })),
});

export const ReservationModel = {
  create: t.Object({
    mail_owner: Text({ maxLength: 320, description: "E-mail address of the owner" }),
    name: Text({
      maxLength: 255,
      description: 'The room as users type it: up to 255 printable characters ("Design Review", "Café")',
    }),
    duration: t.Union([t.Number(), Text({ maxLength: 32 })], { description: "Minutes; a number or a numeric string" }),
    start_time: Text({
      maxLength: 64,
      description: "YYYY-MM-DDTHH:MM, seconds allowed, in timezone unless it ends in an offset (Z, +05:30)",
    }),
    timezone: t.Optional(
      Text({ maxLength: 64, description: 'IANA zone; default America/New_York ("America/New York" accepted)' }),
    ),
    pin: t.Optional(Text({ maxLength: 32, description: "Letters and digits" })),
  }),
  reservation,
  reservations: t.Array(reservation),
};

export const ConferenceModel = {
  /** What mod_reservations posts, form-encoded; each field is checked by the service so Prosody gets a `message`. */
  open: t.Object(
    {
      name: t.Optional(Text({ maxLength: 1023, description: "The room (node of its JID)" })),
      start_time: t.Optional(Text({ maxLength: 64, description: "yyyy-MM-dd'T'HH:mm:ss.SSS and Z or +0000" })),
      mail_owner: t.Optional(Text({ maxLength: 3071, description: "Bare JID of the user who opens the room" })),
    },
    { additionalProperties: true },
  ),
  conference,
  conferences: t.Array(conference),
  conflict: t.Composite([ErrorModel, t.Object({ conflict_id: t.Integer(), message: t.Optional(t.String()) })]),
  refusal: t.Composite([ErrorModel, t.Object({ message: t.Optional(t.String()) })]),
};

export type ReservationInput = typeof ReservationModel.create.static;
/** A reservation as the API shows it: times as given, and the room key beside the name. */
export type Reservation = typeof ReservationModel.reservation.static;
export type ConferenceRequest = typeof ConferenceModel.open.static;
/** Jicofo's conference object; `duration` is in seconds there, unlike a reservation's minutes. */
export type Conference = typeof ConferenceModel.conference.static;
