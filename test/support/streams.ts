/**
 * A stream row as a start request leaves it (`starting`, options as the API stores them), or as
 * a stop request leaves a running one (`stopping`), for tests that drive a stream's states
 * themselves rather than through a recorder.
 */
import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
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

/** A stream of `podName` on this machine that a stop request has marked `stopping`, named after its room. */
export async function insertStoppingStream(accountId: string, room: string, podName: string) {
  const [row] = await db
    .insert(streams)
    .values({
      id: randomUUID(),
      accountId,
      room,
      streamName: room,
      state: "stopping",
      options: optionsOf({ room_name: room }),
      podName,
      host: hostname(),
      // No process: nothing is killed, only the row is at stake.
      pid: 0,
      startedAt: new Date(),
    })
    .returning();
  return row!;
}
