/**
 * Scheduling (spec 4.3) plus what Prosody's mod_reservations calls when
 * `reservations_api_prefix` points at /api/v1/scheduler: POST /conference (form-encoded),
 * GET /conference/{id} after a 409, and DELETE /conference/{id} when the room is destroyed.
 */
import { Elysia, t } from "elysia";
import { auth } from "../auth";
import { accepts, FORM_OR_JSON } from "../../http/accepts";
import { errorResponses } from "../../http/errors";
import { limits } from "../limits";
import { Text } from "../../http/text";
import { conferenceForRoom, endConference, getConference, listConferences, openConference } from "./conferences";
import { ConferenceModel, ReservationModel } from "./model";
import {
  createReservation,
  deleteReservation,
  getReservation,
  listReservations,
  reservationForRoom,
} from "./reservations";

const PREFIX = "/api/v1/scheduler";

const idParams = t.Object({
  id: Text({ maxLength: 32, description: "The record's id: `1`, or `1.0` as cjson-based Prosody modules send it" }),
});
const nameParams = t.Object({
  name: Text({ maxLength: 1023, description: "The room as typed or as Jitsi names it; matched on its room key" }),
});

export const schedulerController = new Elysia({ name: "parley.scheduler", detail: { tags: ["scheduler"] } })
  .use(auth)
  .use(accepts)
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
    // Prosody's mod_reservations posts a form.
    accepts: FORM_OR_JSON,
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
    // A form-encoded reservation is read like JSON (docs/scheduling.md).
    accepts: FORM_OR_JSON,
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
