/**
 * The event catalogue: the public events every feature records with the change they describe
 * (recordEvent, in the change's transaction), their types, the event log's reads and its
 * retention, and following an account's events live (followEvents, as the console's feed
 * does). Its consumers, such as webhooks, read it through this file. What the HTTP
 * application mounts, the event log's routes with their stream and the socket's `events:`
 * topic, is in ./routes.ts, apart, with the cap on open streams (./tail-cap.ts): a worker that
 * records or reads events (the webhooks worker) then loads neither Elysia nor the TypeBox
 * models (see docs/testing.md).
 */
export { EVENT_TYPES, type EventType } from "./event-types";
export { listEvents, parseTypes, publicEvent, purgeOldEvents } from "./log";
export type { EventData, PublicEvent } from "./model";
export { EVENT_STREAMS_CONSUMER, recordEvent, recordEvents, WEBHOOKS_CONSUMER } from "./record";
export { eventSequences, events } from "./schema";
export { followEvents } from "./stream";
