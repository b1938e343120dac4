/**
 * Reservations (spec 4.3). Times are kept exactly as given and, beside them, as the
 * instants they mean in their time zone; everything that compares times uses the instants.
 */
import { and, asc, eq, gt, lt, sql } from "drizzle-orm";
import { AppError } from "../../core/errors";
import { roomKey } from "../../core/room-key";
import { db } from "../../db/client";
import { recordEvent } from "../catalogue";
import type { Reservation, ReservationInput } from "./model";
import { reservations } from "./schema";
import { parseRecordId, validDuration, validEmail, validPin, validRoomName } from "./validation";
import { reservationStart } from "./zoned-time";

/** Serialises every change to one room name of one account, for the transaction's life. */
export async function lockRoom(tx: Pick<typeof db, "execute">, accountId: string, name: string): Promise<void> {
  // drizzle has no builder for advisory locks.
  await tx.execute(sql`select pg_advisory_xact_lock(hashtextextended(${`${accountId}/${name}`}, 0))`);
}

function reservationRecord(row: typeof reservations.$inferSelect): Reservation {
  return {
    id: row.id,
    name: row.name,
    room_key: row.roomKey,
    mail_owner: row.mailOwner,
    start_time: row.startTime,
    duration: row.duration,
    timezone: row.timezone,
    ...(row.pin ? { pin: row.pin } : {}),
  };
}

export async function createReservation(accountId: string, input: ReservationInput): Promise<Reservation> {
  const mailOwner = validEmail(input.mail_owner);
  const key = validRoomName(input.name);
  const duration = validDuration(input.duration);
  const { startsAt, timezone } = reservationStart(input.start_time, input.timezone);
  const pin = validPin(input.pin);
  const endsAt = new Date(startsAt.getTime() + Math.round(duration * 60) * 1000);
  return db.transaction(async (tx) => {
    await lockRoom(tx, accountId, key);
    // Two half-open windows [start, end) overlap when each starts before the other ends.
    const [overlap] = await tx
      .select({ id: reservations.id })
      .from(reservations)
      .where(
        and(
          eq(reservations.accountId, accountId),
          eq(reservations.roomKey, key),
          lt(reservations.startsAt, endsAt),
          gt(reservations.endsAt, startsAt),
        ),
      )
      .orderBy(asc(reservations.startsAt))
      .limit(1);
    if (overlap) {
      throw new AppError(
        "conflict",
        `room ${key} is already reserved at an overlapping time (reservation ${overlap.id})`,
        { conflict_id: overlap.id },
      );
    }
    const [row] = await tx
      .insert(reservations)
      .values({
        accountId,
        name: input.name,
        roomKey: key,
        mailOwner,
        startTime: input.start_time,
        timezone,
        duration,
        pin,
        startsAt,
        endsAt,
      })
      .returning();
    await recordEvent(tx, accountId, "reservation.created", {
      reservation_id: row!.id,
      room: key,
      mail_owner: mailOwner,
      start_time: input.start_time,
      duration,
      timezone,
    });
    return reservationRecord(row!);
  });
}

export async function listReservations(accountId: string): Promise<Reservation[]> {
  const rows = await db
    .select()
    .from(reservations)
    .where(eq(reservations.accountId, accountId))
    .orderBy(asc(reservations.startsAt), asc(reservations.id));
  return rows.map(reservationRecord);
}

export async function getReservation(accountId: string, id: string): Promise<Reservation> {
  const [row] = await db
    .select()
    .from(reservations)
    .where(and(eq(reservations.accountId, accountId), eq(reservations.id, parseRecordId(id, "reservation"))));
  if (!row) throw new AppError("not_found", `no reservation ${id}`);
  return reservationRecord(row);
}

/** The room's reservation that is running or comes next; when all are over, the last one. */
export async function reservationForRoom(accountId: string, room: string, now = new Date()): Promise<Reservation> {
  const key = roomKey(room.trim());
  const rows = await db
    .select()
    .from(reservations)
    .where(and(eq(reservations.accountId, accountId), eq(reservations.roomKey, key)))
    .orderBy(asc(reservations.startsAt));
  const row = rows.find((candidate) => candidate.endsAt > now) ?? rows.at(-1);
  if (!row) throw new AppError("not_found", `no reservation for room ${key}`);
  return reservationRecord(row);
}

export async function deleteReservation(accountId: string, id: string): Promise<Reservation> {
  const row = await db.transaction(async (tx) => {
    const [deleted] = await tx
      .delete(reservations)
      .where(and(eq(reservations.accountId, accountId), eq(reservations.id, parseRecordId(id, "reservation"))))
      .returning();
    if (deleted)
      await recordEvent(tx, accountId, "reservation.deleted", { reservation_id: deleted.id, room: deleted.roomKey });
    return deleted;
  });
  if (!row) throw new AppError("not_found", `no reservation ${id}`);
  return reservationRecord(row);
}
