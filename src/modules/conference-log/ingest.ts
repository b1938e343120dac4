/**
 * Ingestion of Jitsi's event_sync deliveries: each is checked (a clear 4xx for what the module
 * never sends), named by what identifies the fact (so the module's retries are stored once),
 * and appended to the conference log with the catalogue events it means.
 */
import { AppError } from "../../core/errors";
import { roomKey } from "../../core/room-key";
import { publishEventSync } from "./publish";
import { breakoutOf, EVENT_SYNC_NAMES, type EventSyncKind, eventSyncFacts, occupantsOf } from "./event-sync";
import type { EventSyncBody, EventSyncOccupant } from "./model";
import { appendEvent } from "./service";

/** 2286-11-20 in unix seconds: a bigger number is a millisecond timestamp sent by mistake. */
const LATEST_UNIX_SECONDS = 9_999_999_999;

function unixSeconds(field: string, value: number | undefined): Date {
  if (value === undefined) throw new AppError("validation_failed", `${field}: required for this event`);
  if (!Number.isFinite(value) || value < 0 || value > LATEST_UNIX_SECONDS) {
    throw new AppError("validation_failed", `${field}: must be a unix time in seconds, got ${value}`);
  }
  return new Date(Math.floor(value) * 1000);
}

/**
 * Checks an event_sync delivery and appends it. The dedupe key is built from what names
 * the fact in the payload (room, breakout, occupant jid and the source's own timestamps),
 * so the module's retries of one delivery are stored once. Returns true when it is new.
 */
export async function recordEventSync(accountId: string, kind: EventSyncKind, body: EventSyncBody): Promise<boolean> {
  const expected = EVENT_SYNC_NAMES[kind];
  if (body.event_name !== expected) {
    throw new AppError("validation_failed", `event_name: this route takes "${expected}", got "${body.event_name}"`);
  }
  const room = roomKey(body.room_name.trim());
  if (room === "") throw new AppError("validation_failed", "room_name: must not be empty");
  if (body.is_breakout && !body.breakout_room_id) {
    throw new AppError("validation_failed", "breakout_room_id: required when is_breakout is true");
  }
  const breakout = breakoutOf(body);
  const where = `${room}|${breakout}`;
  let occurredAt: Date;
  let subject: string | undefined;
  let dedupeKey: string;
  switch (kind) {
    case "room_created": {
      occurredAt = unixSeconds("created_at", body.created_at);
      dedupeKey = `room_created|${where}|${occurredAt.getTime() / 1000}`;
      break;
    }
    case "room_destroyed": {
      const createdAt = unixSeconds("created_at", body.created_at);
      occurredAt = unixSeconds("destroyed_at", body.destroyed_at);
      if (occurredAt < createdAt)
        throw new AppError("validation_failed", "destroyed_at: must not be before created_at");
      for (const [index, occupant] of occupantsOf(body).entries())
        checkOccupant(`all_occupants.${index}`, occupant, false);
      dedupeKey = `room_destroyed|${where}|${createdAt.getTime() / 1000}`;
      break;
    }
    case "occupant_joined":
    case "occupant_left": {
      if (!body.occupant) throw new AppError("validation_failed", "occupant: required for this event");
      const leaving = kind === "occupant_left";
      const { joinedAt, leftAt } = checkOccupant("occupant", body.occupant, leaving);
      occurredAt = leaving ? leftAt! : joinedAt;
      subject = body.occupant.occupant_jid;
      dedupeKey = `${kind}|${where}|${subject}|${joinedAt.getTime() / 1000}`;
      break;
    }
  }
  const facts = eventSyncFacts(kind, body);
  return appendEvent({ accountId, kind, room, occurredAt, subject, payload: body, dedupeKey, facts }, (tx) =>
    publishEventSync(tx, accountId, kind, room, facts),
  );
}

function checkOccupant(field: string, occupant: EventSyncOccupant, leftRequired: boolean) {
  if (typeof occupant.occupant_jid !== "string" || occupant.occupant_jid === "") {
    throw new AppError("validation_failed", `${field}.occupant_jid: required`);
  }
  const joinedAt = unixSeconds(`${field}.joined_at`, occupant.joined_at);
  const leftAt =
    occupant.left_at === undefined && !leftRequired ? undefined : unixSeconds(`${field}.left_at`, occupant.left_at);
  if (leftAt && leftAt < joinedAt)
    throw new AppError("validation_failed", `${field}.left_at: must not be before joined_at`);
  return { joinedAt, leftAt };
}
