/**
 * Scheduling (spec 4.3) plus what Prosody's mod_reservations calls when
 * `reservations_api_prefix` points at /api/v1/scheduler: POST /conference (form-encoded),
 * GET /conference/{id} after a 409, and DELETE /conference/{id} when the room is destroyed.
 */
import { Elysia, t } from "elysia";
import { auth } from "../auth";
import { ErrorModel, errorResponses } from "../../http/errors";
import { limits } from "../limits";
import { Text } from "../../http/text";
import {
  conferenceForRoom,
  createReservation,
  deleteReservation,
  endConference,
  getConference,
  getReservation,
  listConferences,
  listReservations,
  openConference,
  reservationForRoom,
} from "./service";

const PREFIX = "/api/v1/scheduler";

const reservation = t.Object({
  id: t.Integer(),
  name: t.String({ description: "As given", examples: ["Design Review"] }),
  room_key: t.String({ description: "The room as Jitsi names it (jitsi-meet's getBackendSafeRoomName)", examples: ["design%20review"] }),
  mail_owner: t.String({ examples: ["owner@example.com"] }),
  start_time: t.String({ description: "As given, local to timezone", examples: ["2030-01-15T10:00"] }),
  duration: t.Number({ description: "Minutes" }),
  timezone: t.String({ description: "As given; America/New_York when absent" }),
  pin: t.Optional(t.String()),
});

const conference = t.Object({
  id: t.Integer(),
  name: t.String({ description: "The room (JID node) as Prosody sent it" }),
  mail_owner: t.String({ description: "The bare JID Prosody sent" }),
  start_time: t.String({ description: "UTC, as Prosody sent it or the reservation's start", examples: ["2030-01-15T15:00:00.000Z"] }),
  duration: t.Number({ description: "Seconds (Jicofo's reservation contract)" }),
  timezone: t.Literal("UTC"),
  reservation_id: t.Nullable(t.Integer()),
  ended_at: t.Nullable(t.String({ description: "When the room was destroyed or its time ran out" })),
});

export const ReservationModel = {
  create: t.Object({
    mail_owner: Text({ maxLength: 320, description: "E-mail address of the owner" }),
    name: Text({ maxLength: 255, description: "The room as users type it: up to 255 printable characters (\"Design Review\", \"Café\")" }),
    duration: t.Union([t.Number(), Text({ maxLength: 32 })], { description: "Minutes; a number or a numeric string" }),
    start_time: Text({ maxLength: 64, description: "YYYY-MM-DDTHH:MM, seconds allowed, in timezone" }),
    timezone: t.Optional(Text({ maxLength: 64, description: "IANA zone; default America/New_York (\"America/New York\" accepted)" })),
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

const idParams = t.Object({ id: Text({ maxLength: 32, description: "The record's id: `1`, or `1.0` as cjson-based Prosody modules send it" }) });
const nameParams = t.Object({ name: Text({ maxLength: 1023, description: "The room as typed or as Jitsi names it; matched on its room key" }) });

export const schedulerController = new Elysia({ name: "parley.scheduler", detail: { tags: ["scheduler"] } })
  .use(auth)
  .use(limits)
  .get(`${PREFIX}/conference`, ({ account }) => listConferences(account.id), {
    apiKey: true,
    limit: "scheduler",
    response: { 200: ConferenceModel.conferences, ...errorResponses(401) },
    detail: { summary: "The conferences Prosody opened, oldest first" },
  })
  .post(`${PREFIX}/conference`, ({ account, body }) => openConference(account.id, body), {
    apiKey: true,
    limit: "scheduler",
    body: ConferenceModel.open,
    response: {
      200: ConferenceModel.conference,
      403: ConferenceModel.refusal,
      409: ConferenceModel.conflict,
      419: ConferenceModel.refusal,
      422: ConferenceModel.refusal,
      ...errorResponses(400, 401),
    },
    detail: { summary: "Prosody's mod_reservations: may this room start now? (form-encoded)" },
  })
  .get(`${PREFIX}/conference/room/:name`, ({ account, params }) => conferenceForRoom(account.id, params.name), {
    apiKey: true,
    limit: "scheduler",
    params: nameParams,
    response: { 200: ConferenceModel.conference, ...errorResponses(401, 404) },
    detail: { summary: "The room's open conference, or else its latest" },
  })
  .get(`${PREFIX}/conference/:id`, ({ account, params }) => getConference(account.id, params.id), {
    apiKey: true,
    limit: "scheduler",
    params: idParams,
    response: { 200: ConferenceModel.conference, 404: ConferenceModel.refusal, ...errorResponses(401) },
    detail: { summary: "One conference, as an object (what Prosody reads after a 409)" },
  })
  .delete(`${PREFIX}/conference/:id`, ({ account, params }) => endConference(account.id, params.id), {
    apiKey: true,
    limit: "scheduler",
    params: idParams,
    response: { 200: ConferenceModel.conference, 404: ConferenceModel.refusal, ...errorResponses(401) },
    detail: { summary: "Prosody destroyed the room: the conference ends" },
  })
  .get(`${PREFIX}/reservation`, ({ account }) => listReservations(account.id), {
    apiKey: true,
    limit: "scheduler",
    response: { 200: ReservationModel.reservations, ...errorResponses(401) },
    detail: { summary: "The account's reservations, earliest first" },
  })
  .post(`${PREFIX}/reservation`, ({ account, body }) => createReservation(account.id, body), {
    apiKey: true,
    limit: "scheduler",
    body: ReservationModel.create,
    response: { 200: ReservationModel.reservation, 409: ConferenceModel.conflict, ...errorResponses(400, 401, 422) },
    detail: { summary: "Reserve a room; an overlapping reservation of the same room is 409 with conflict_id" },
  })
  .get(`${PREFIX}/reservation/room/:name`, ({ account, params }) => reservationForRoom(account.id, params.name), {
    apiKey: true,
    limit: "scheduler",
    params: nameParams,
    response: { 200: ReservationModel.reservation, ...errorResponses(401, 404) },
    detail: { summary: "The room's running or next reservation; when all are over, its last" },
  })
  .get(`${PREFIX}/reservation/:id`, ({ account, params }) => getReservation(account.id, params.id), {
    apiKey: true,
    limit: "scheduler",
    params: idParams,
    response: { 200: ReservationModel.reservation, ...errorResponses(401, 404) },
    detail: { summary: "One reservation" },
  })
  .delete(`${PREFIX}/reservation/:id`, ({ account, params }) => deleteReservation(account.id, params.id), {
    apiKey: true,
    limit: "scheduler",
    params: idParams,
    response: { 200: ReservationModel.reservation, ...errorResponses(401, 404) },
    detail: { summary: "Delete a reservation; returns what was deleted" },
  });
