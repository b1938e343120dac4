/**
 * A stream row as a start request leaves it (`starting`, options as the API stores them), for
 * tests that drive a stream's states themselves rather than through a recorder.
 */
import { randomUUID } from "node:crypto";
import { db } from "../../src/db/client";
import { optionsOf } from "../../src/modules/streaming/request";
import { streams } from "../../src/modules/streaming/schema";

export async function insertStartingStream(accountId: string, room: string, options: Record<string, unknown> = {}) {
  const [row] = await db
    .insert(streams)
    .values({
      id: randomUUID(),
      accountId,
      room,
      streamName: `${room}-abcd`,
      state: "starting",
      options: optionsOf({ room_name: room, ...options }),
    })
    .returning();
  return row!;
}
