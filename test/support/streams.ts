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

/** A stream row of `room` in `state`, named after its room unless `fields` say otherwise. */
async function insertStream(
  accountId: string,
  room: string,
  state: (typeof streams.$inferInsert)["state"],
  fields: Partial<typeof streams.$inferInsert>,
  options: Record<string, unknown> = {},
) {
  const [row] = await db
    .insert(streams)
    .values({
      id: randomUUID(),
      accountId,
      room,
      streamName: room,
      state,
      options: optionsOf({ room_name: room, ...options }),
      ...fields,
    })
    .returning();
  return row!;
}

export function insertStartingStream(accountId: string, room: string, options: Record<string, unknown> = {}) {
  return insertStream(accountId, room, "starting", { streamName: `${room}-abcd` }, options);
}

/** A stream of `podName` on this machine that a stop request has marked `stopping`, named after its room. */
export function insertStoppingStream(accountId: string, room: string, podName: string) {
  // No process: nothing is killed, only the row is at stake.
  return insertStream(accountId, room, "stopping", { podName, host: hostname(), pid: 0, startedAt: new Date() });
}
