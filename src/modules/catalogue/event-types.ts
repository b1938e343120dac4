/**
 * The names of the public event catalogue's types, in catalogue order. Apart from the
 * catalogue's models (./model.ts) so that what only checks a name, such as the webhooks
 * worker, does not load the schema library the models are built with.
 */
const NAMES = [
  "room.started",
  "room.ended",
  "participant.joined",
  "participant.left",
  "conference.started",
  "conference.ended",
  "reservation.created",
  "reservation.deleted",
  "stream.queued",
  "stream.started",
  "stream.failed",
  "stream.stopped",
  "recording.ready",
  "call.started",
  "call.ended",
  "usage.day_settled",
  "endpoint.circuit_opened",
  "endpoint.circuit_closed",
  "endpoint.disabled",
] as const;

export type EventType = (typeof NAMES)[number];
export const EVENT_TYPES: EventType[] = [...NAMES];
