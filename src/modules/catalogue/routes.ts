/**
 * What the HTTP application mounts of the catalogue: the event log (`GET /api/v1/events`) and
 * its live stream (Server-Sent Events, resumable with Last-Event-ID), both taking the account's
 * API key, and the socket's `events:<account_id>` topic (./channel.ts).
 */
import { Elysia, t } from "elysia";
import { auth, authenticateFirst } from "../auth";
import { AppError } from "../../core/errors";
import { credentialFrom } from "../../http/credential";
import { Cursor } from "../../http/cursor";
import { errorResponses } from "../../http/errors";
import { answerOf, errorAnswers } from "../../http/openapi";
import { credentialCounter } from "../limits";
import { listEvents, parseTypes } from "./log";
import { CatalogueModel } from "./model";
import { eventStream } from "./stream";
import { eventStreams } from "./tail-cap";

export { eventsChannel } from "./channel";

export const eventLogController = new Elysia({
  name: "parley.events.log",
  prefix: "/api/v1/events",
  detail: { tags: ["events"] },
})
  .use(auth)
  .onTransform(authenticateFirst)
  // The catalogue union built from a map loses which data goes with which
  // type, so TypeScript cannot match it; the runtime check still does.
  .get(
    "",
    async ({ account, query }) =>
      (await listEvents(account.id, {
        after: query.after,
        types: parseTypes(query.types),
        limit: query.limit,
      })) as never,
    {
      apiKey: true,
      query: CatalogueModel.eventQuery,
      response: { 200: CatalogueModel.eventPage, ...errorResponses(400, 401, 422) },
      detail: { summary: "The account's catalogue events in sequence order, after a cursor (see docs/webhooks.md)" },
    },
  )
  .get(
    "/stream",
    ({ account, query, headers, request }) => {
      const resume = headers["last-event-id"] ?? (query.after === undefined ? undefined : String(query.after));
      if (resume !== undefined && !/^\d{1,15}$/.test(resume.trim()))
        throw new AppError("validation_failed", "Last-Event-ID: must be an event's sequence number");
      const types = parseTypes(query.types);
      const key = credentialCounter(credentialFrom(headers.authorization)!);
      const release = eventStreams.take([key, account.id]);
      return eventStream(
        account.id,
        { after: resume === undefined ? undefined : Number(resume), types },
        request.signal,
        release,
      );
    },
    {
      apiKey: true,
      query: t.Object({ after: t.Optional(Cursor()), types: t.Optional(t.String()) }),
      detail: {
        summary:
          "Server-Sent Events of the account's catalogue events; each has `id:` its sequence, so a reconnect " +
          "with Last-Event-ID gets exactly what it missed. Without a cursor it starts with events from now on.",
        responses: {
          200: answerOf("The live stream of events (text/event-stream)", {
            "text/event-stream": {
              type: "string",
              description: "Events as `id: <sequence>`, `event: <type>` and `data: <the event as JSON>` lines",
            },
          }),
          // A Last-Event-ID that is not a sequence number; the caps on open streams.
          ...errorAnswers("422"),
          ...eventStreams.answers(),
        },
      },
    },
  );
