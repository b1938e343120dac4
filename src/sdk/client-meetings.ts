/**
 * The client's methods for meetings, on the account's API key: conferences and reservations,
 * Jitsi's conference mapper and dial-in numbers, and a room's live streams. Apart from chat,
 * the account's record and the operators' routes, the other groups of methods.
 */
import type { QueryOf, RequestBody } from "./api-types.js";
import type { Transport } from "./transport.js";

export function schedulerMethods(transport: Transport) {
  const { api, ok } = transport;
  const scheduler = {
    listConferences: () => ok(api.GET("/api/v1/scheduler/conference")),
    createConference: (body: RequestBody<"/api/v1/scheduler/conference", "post">) =>
      ok(api.POST("/api/v1/scheduler/conference", { body })),
    getConference: (id: string | number) =>
      ok(api.GET("/api/v1/scheduler/conference/{id}", { params: { path: { id: String(id) } } })),
    getConferenceByRoom: (name: string) =>
      ok(api.GET("/api/v1/scheduler/conference/room/{name}", { params: { path: { name } } })),
    deleteConference: (id: string | number) =>
      ok(api.DELETE("/api/v1/scheduler/conference/{id}", { params: { path: { id: String(id) } } })),
    listReservations: () => ok(api.GET("/api/v1/scheduler/reservation")),
    createReservation: (body: RequestBody<"/api/v1/scheduler/reservation", "post">) =>
      ok(api.POST("/api/v1/scheduler/reservation", { body })),
    getReservation: (id: string | number) =>
      ok(api.GET("/api/v1/scheduler/reservation/{id}", { params: { path: { id: String(id) } } })),
    getReservationByRoom: (name: string) =>
      ok(api.GET("/api/v1/scheduler/reservation/room/{name}", { params: { path: { name } } })),
    deleteReservation: (id: string | number) =>
      ok(api.DELETE("/api/v1/scheduler/reservation/{id}", { params: { path: { id: String(id) } } })),
  };
  return scheduler;
}
export type SchedulerMethods = ReturnType<typeof schedulerMethods>;

export function mapperMethods(transport: Transport) {
  const { api, ok } = transport;
  const mapper = {
    conference: (query: QueryOf<"/api/v1/conference-mapper/conferenceMapper", "get">) =>
      ok(api.GET("/api/v1/conference-mapper/conferenceMapper", { params: { query } })),
    phoneNumbers: (query: QueryOf<"/api/v1/conference-mapper/phoneNumberList", "get"> = {}) =>
      ok(api.GET("/api/v1/conference-mapper/phoneNumberList", { params: { query } })),
    /**
     * The same under the account id with no credential, open to any
     * origin: what a browser (jitsi-meet's dial-in page) calls.
     */
    publicConference: (
      accountId: string,
      query: QueryOf<"/api/v1/conference-mapper/{accountId}/conferenceMapper", "get">,
    ) =>
      ok(
        api.GET("/api/v1/conference-mapper/{accountId}/conferenceMapper", {
          params: { path: { accountId }, query },
        }),
      ),
    publicPhoneNumbers: (
      accountId: string,
      query: QueryOf<"/api/v1/conference-mapper/{accountId}/phoneNumberList", "get"> = {},
    ) =>
      ok(
        api.GET("/api/v1/conference-mapper/{accountId}/phoneNumberList", {
          params: { path: { accountId }, query },
        }),
      ),
  };
  return mapper;
}
export type MapperMethods = ReturnType<typeof mapperMethods>;

export function streamingMethods(transport: Transport) {
  const { api, ok } = transport;
  const streaming = {
    start: (body: RequestBody<"/terraform/v1/hooks/srs/startRecording", "post">) =>
      ok(api.POST("/terraform/v1/hooks/srs/startRecording", { body })),
    stop: (roomName: string) =>
      ok(api.POST("/terraform/v1/hooks/srs/stopRecording", { body: { room_name: roomName } })),
    viewers: (streamName: string) =>
      ok(
        api.GET("/terraform/v1/hooks/srs/live/viewers/count/{stream_name}", {
          params: { path: { stream_name: streamName } },
        }),
      ),
  };
  return streaming;
}
export type StreamingMethods = ReturnType<typeof streamingMethods>;
