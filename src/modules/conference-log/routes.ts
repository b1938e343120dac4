/**
 * Ingestion of Jitsi's event_sync Prosody module (jitsi-contrib/prosody-plugins), unchanged:
 * set its `api_prefix` to `<Parley>/api/v1` and its `api_headers` to
 * `{ ["Authorization"] = "Bearer <API key>" }`.
 */
import { Elysia } from "elysia";
import { auth } from "../auth";
import { errorResponses } from "../../http/errors";
import { limits } from "../limits";
import { ConferenceLogModel } from "./model";
import { recordEventSync } from "./ingest";

const accepted = { 200: ConferenceLogModel.accepted, ...errorResponses(400, 401, 422) };

export const conferenceLogController = new Elysia({
  name: "parley.conference-log",
  prefix: "/api/v1/events",
  detail: { tags: ["events"] },
})
  .use(auth)
  .use(limits)
  .post(
    "/room/created",
    async ({ account, body }) => ({ stored: await recordEventSync(account.id, "room_created", body) }),
    {
      apiKey: true,
      limit: "events",
      body: ConferenceLogModel.roomCreated,
      response: accepted,
      detail: { summary: "event_sync muc-room-created: a conference room was created" },
    },
  )
  .post(
    "/room/destroyed",
    async ({ account, body }) => ({ stored: await recordEventSync(account.id, "room_destroyed", body) }),
    {
      apiKey: true,
      limit: "events",
      body: ConferenceLogModel.roomDestroyed,
      response: accepted,
      detail: { summary: "event_sync muc-room-destroyed: a room ended, listing every occupant it had" },
    },
  )
  .post(
    "/occupant/joined",
    async ({ account, body }) => ({ stored: await recordEventSync(account.id, "occupant_joined", body) }),
    {
      apiKey: true,
      limit: "events",
      body: ConferenceLogModel.occupantJoined,
      response: accepted,
      detail: { summary: "event_sync muc-occupant-joined: someone joined a room" },
    },
  )
  .post(
    "/occupant/left",
    async ({ account, body }) => ({ stored: await recordEventSync(account.id, "occupant_left", body) }),
    {
      apiKey: true,
      limit: "events",
      body: ConferenceLogModel.occupantLeft,
      response: accepted,
      detail: { summary: "event_sync muc-occupant-left: someone left a room" },
    },
  );
