/** Conference events stored straight through the events service, and how many of them wait to be folded. */
import { count, eq } from "drizzle-orm";
import { db } from "../../src/db/client";
import { conferenceEventsUnfolded } from "../../src/modules/events/schema";
import { appendEvent } from "../../src/modules/events/service";
import { at } from "./event-sync";

/** A finished stay of `minutes` from 10:00 in `room`, as event_sync reports its leave. */
export function storeStay(accountId: string, room: string, who: string, minutes: number) {
  const joined = at("10:00:00");
  return appendEvent({
    accountId,
    kind: "occupant_left",
    room,
    occurredAt: new Date((joined + minutes * 60) * 1000),
    subject: who,
    payload: { event_name: "muc-occupant-left", room_name: room, occupant: { occupant_jid: who, id: who, joined_at: joined, left_at: joined + minutes * 60 } },
    dedupeKey: `left|${room}|${who}`,
  });
}

/** The join of a stay from 10:00 in `room`, as event_sync reports it (its leave is `storeStay`). */
export function storeJoin(accountId: string, room: string, who: string) {
  const joined = at("10:00:00");
  return appendEvent({
    accountId,
    kind: "occupant_joined",
    room,
    occurredAt: new Date(joined * 1000),
    subject: who,
    payload: { event_name: "muc-occupant-joined", room_name: room, occupant: { occupant_jid: who, id: who, joined_at: joined } },
    dedupeKey: `joined|${room}|${who}`,
  });
}

/** Events not folded yet: of one account, or of every account. */
export async function unfoldedCount(accountId?: string): Promise<number> {
  const [row] = await db
    .select({ n: count() })
    .from(conferenceEventsUnfolded)
    .where(accountId === undefined ? undefined : eq(conferenceEventsUnfolded.accountId, accountId));
  return row!.n;
}
