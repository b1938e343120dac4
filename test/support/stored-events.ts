/** Conference events stored straight through the events service, and how many of them wait to be folded. */
import { count, eq } from "drizzle-orm";
import { db } from "../../src/db/client";
import { conferenceEventsUnfolded } from "../../src/modules/conference-log/schema";
import { appendEvent } from "../../src/modules/conference-log/service";
import { at } from "./event-sync";

/** A join at 10:00 in `room`, or with `minutes` the leave of the stay from then, as event_sync reports them. */
function storeOccupantEvent(accountId: string, room: string, who: string, minutes?: number) {
  const joined = at("10:00:00");
  const left = minutes === undefined ? undefined : joined + minutes * 60;
  const step = left === undefined ? "joined" : "left";
  return appendEvent({
    accountId,
    kind: `occupant_${step}`,
    room,
    occurredAt: new Date((left ?? joined) * 1000),
    subject: who,
    payload: {
      event_name: `muc-occupant-${step}`,
      room_name: room,
      occupant: { occupant_jid: who, id: who, joined_at: joined, ...(left === undefined ? {} : { left_at: left }) },
    },
    dedupeKey: `${step}|${room}|${who}`,
  });
}

/** A finished stay of `minutes` from 10:00 in `room`, as event_sync reports its leave. */
export const storeStay = (accountId: string, room: string, who: string, minutes: number) =>
  storeOccupantEvent(accountId, room, who, minutes);

/** The join of a stay from 10:00 in `room`, as event_sync reports it (its leave is `storeStay`). */
export const storeJoin = (accountId: string, room: string, who: string) => storeOccupantEvent(accountId, room, who);

/** Events not folded yet: of one account, or of every account. */
export async function unfoldedCount(accountId?: string): Promise<number> {
  const [row] = await db
    .select({ n: count() })
    .from(conferenceEventsUnfolded)
    .where(accountId === undefined ? undefined : eq(conferenceEventsUnfolded.accountId, accountId));
  return row!.n;
}
