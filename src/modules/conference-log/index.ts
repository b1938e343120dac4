/**
 * The conference log: storing what happened in a conference (the SIP gateway's calls, the
 * streams' viewers), its tables as the usage fold reads them, and the outbox consumers the
 * workers drain it with. Jitsi's `event_sync` ingestion (./routes.ts) is mounted by the app.
 */
export { appendEvent, type ConferenceEvent, storeEvents } from "./service";
export {
  conferenceEvents,
  conferenceEventsUnfolded,
  type EventKind,
  MEDIA_EVENT_KINDS,
  type StoredEvent,
} from "./schema";
export { FOLD_CONSUMER, OCCUPANCY_CONSUMER, ringKey, roomOfRingKey } from "./rings";
export { roomOccupancy } from "./reads";
