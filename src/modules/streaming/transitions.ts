/**
 * Every move of a stream's state after its request created it `starting`: the API marks it
 * stopping, its recorder worker claims it and reports it running, and whoever gets there
 * first finishes it. Each move is made once, writes its events, and rings the waiters of the
 * stream's state (state.ts) in the same transaction. Running
 * the recorder process is the worker's (workers/recorder/).
 */
import { and, eq, inArray, isNull, sql } from "drizzle-orm";
import { db } from "../../db/client";
import { rowsOf } from "../../db/rows";
import { storeEvents } from "../conference-log";
import type { SealedKey } from "../accounts";
import { recordEvent } from "../catalogue";
import { type StreamState, streams } from "./schema";
import { nextTurn, queuePosition } from "./queue";
import { ringState } from "./state";
import { type Stream, streamUrls } from "./stream";
import { takePeakViewers } from "./viewers";

/** How catalogue events name a stream. */
function streamNamed(stream: Stream) {
  return { stream_id: stream.id, stream_name: stream.streamName, room: stream.room };
}

export interface RecorderPlace {
  podName: string;
  host: string;
  pid: number;
}

/**
 * A worker takes the stream, before it runs a recorder for it: once only, so two workers that
 * both got to it (its start job and a worker with freed room taking the queue's first) never
 * both record it. A queued stream is starting from here on, and its sealed destinations dropped.
 */
export async function takeStream(streamId: string, podName: string): Promise<boolean> {
  const taken = await db
    .update(streams)
    .set({ podName, state: "starting", queuedDestinations: null })
    .where(and(eq(streams.id, streamId), inArray(streams.state, ["queued", "starting"]), isNull(streams.podName)))
    .returning({ id: streams.id });
  return taken.length > 0;
}

/** Names the recorder's process before it publishes, so reconciliation can find it. */
export async function claimStream(streamId: string, place: RecorderPlace): Promise<boolean> {
  const claimed = await db
    .update(streams)
    .set(place)
    .where(and(eq(streams.id, streamId), eq(streams.state, "starting"), eq(streams.podName, place.podName)))
    .returning({ id: streams.id });
  return claimed.length > 0;
}

/**
 * No recorder worker has room: starting → queued, with the start's destinations sealed into
 * the row (the database, not Redis, is what keeps the queue). False when it moved meanwhile.
 */
export async function markQueued(streamId: string, destinations: SealedKey | null): Promise<boolean> {
  const queued = await db.transaction(async (tx) => {
    const [row] = await tx
      .update(streams)
      .set({
        state: "queued",
        queuedDestinations: destinations,
        // The row being queued, named as the update's own table (the turn's subqueries read `q`).
        queueTurn: nextTurn(sql.raw("streams.account_id"), sql.raw("streams.priority")),
      })
      .where(and(eq(streams.id, streamId), eq(streams.state, "starting")))
      .returning();
    if (!row) return undefined;
    await recordEvent(tx, row.accountId, "stream.queued", {
      ...streamNamed(row),
      position: await queuePosition(tx, row),
    });
    ringState(tx, streamId);
    return row;
  });
  return queued !== undefined;
}

/** The recorder is publishing: starting → running. False when the request gave up meanwhile. */
export async function markRunning(streamId: string): Promise<boolean> {
  const stream = await db.transaction(async (tx) => {
    const [running] = await tx
      .update(streams)
      .set({ state: "running", startedAt: new Date() })
      .where(and(eq(streams.id, streamId), eq(streams.state, "starting")))
      .returning();
    if (!running) return undefined;
    await recordEvent(tx, running.accountId, "stream.started", {
      ...streamNamed(running),
      recording: running.options.isRecording,
    });
    // The usage events commit with the move too, so whoever wakes on its ring finds them written.
    const started = { accountId: running.accountId, room: running.room, occurredAt: running.startedAt! };
    await storeEvents(tx, [
      {
        ...started,
        kind: "stream_started",
        subject: running.streamName,
        payload: { recording: running.options.isRecording },
        dedupeKey: `stream:${running.id}:started`,
      },
      ...(running.options.isRecording
        ? [
            {
              ...started,
              kind: "recording_started" as const,
              subject: running.streamName,
              dedupeKey: `stream:${running.id}:recording_started`,
            },
          ]
        : []),
    ]);
    ringState(tx, streamId);
    return running;
  });
  return stream !== undefined;
}

/**
 * A stop is asked for the stream: starting or running → stopping. Returns the state it left,
 * or undefined when it was not starting or running (already stopping, or finished).
 */
export async function markStopping(streamId: string): Promise<"starting" | "running" | undefined> {
  // One statement: the state it left is read under the row's lock, so a move starting → running
  // between a read and the update cannot be lost.
  const [marked] = rowsOf<{ state: "starting" | "running" }>(
    await db.execute(sql`
      update streams s set state = 'stopping'
      from (select id, state from streams where id = ${streamId} and state in ('starting', 'running') for update) prior
      where s.id = prior.id
      returning prior.state`),
  );
  if (!marked) return undefined;
  // One statement is its own transaction: the global handle rings at once.
  ringState(db, streamId);
  return marked.state;
}

/** The stop could not be queued: stopping → the state markStopping left, if nothing moved it since. */
export async function unmarkStopping(streamId: string, to: "starting" | "running"): Promise<void> {
  await db
    .update(streams)
    .set({ state: to })
    .where(and(eq(streams.id, streamId), eq(streams.state, "stopping")));
  ringState(db, streamId);
}

/**
 * Moves a stream from one of `from` to stopped or failed, once: the recorder, the stop job
 * and reconciliation may race to do it, and only the first one writes the events.
 */
export async function finishStream(
  streamId: string,
  from: StreamState[],
  state: "stopped" | "failed",
  reason: string,
  recordingKey?: string,
): Promise<Stream | undefined> {
  // The usage events commit with the move, so a stop acknowledged is never a stop the report misses.
  const stream = await db.transaction(async (tx) => {
    const [finished] = await tx
      .update(streams)
      .set({
        state,
        reason,
        stoppedAt: new Date(),
        queuedDestinations: null,
        ...(recordingKey ? { recordingKey } : {}),
      })
      .where(and(eq(streams.id, streamId), inArray(streams.state, from)))
      .returning();
    if (!finished) return undefined;
    ringState(tx, streamId);
    await recordEvent(tx, finished.accountId, state === "failed" ? "stream.failed" : "stream.stopped", {
      ...streamNamed(finished),
      reason,
    });
    if (recordingKey)
      await recordEvent(tx, finished.accountId, "recording.ready", {
        ...streamNamed(finished),
        object_key: recordingKey,
        vod_url: streamUrls(finished).vod_url,
      });
    if (!finished.startedAt) return finished;
    // Taken once the move is certain: a stream another caller still runs keeps its viewers.
    const peak = await takePeakViewers(finished);
    const stopped = { accountId: finished.accountId, room: finished.room, occurredAt: finished.stoppedAt! };
    await storeEvents(tx, [
      {
        ...stopped,
        kind: "stream_stopped",
        subject: finished.streamName,
        payload: { recording: finished.options.isRecording, reason, peak_viewers: peak },
        dedupeKey: `stream:${finished.id}:stopped`,
      },
      ...(finished.options.isRecording
        ? [
            {
              ...stopped,
              kind: "recording_stopped" as const,
              subject: finished.streamName,
              payload: recordingKey ? { key: recordingKey } : {},
              dedupeKey: `stream:${finished.id}:recording_stopped`,
            },
          ]
        : []),
    ]);
    return finished;
  });
  return stream;
}
