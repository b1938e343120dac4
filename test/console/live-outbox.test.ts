/**
 * A console live feed is woken by the outbox: a stored change that records a catalogue event
 * reaches the feeds of its account, and the feeds of every account, as soon as the feed may
 * compute again (250 ms), not on a tick of its own.
 */
import { expect, test } from "bun:test";
import { randomUUID } from "node:crypto";
import { db } from "../../src/db/client";
import { liveFeed } from "../../src/modules/console/live";
import type { Viewer } from "../../src/modules/console/sessions";
import { optionsOf } from "../../src/modules/streaming/request";
import { streams } from "../../src/modules/streaming/schema";
import { recordEvent } from "../../src/modules/catalogue";
import { newAccount } from "../helpers";

/** Under the one second a feed used to wait after each snapshot before it looked again. */
const PROMPT_MS = 800;

/** The feed's snapshots as they come. */
function snapshots(response: Response) {
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  return async function next(deadline: number): Promise<{ streams: Array<{ id: string; state: string }> }> {
    for (;;) {
      const end = buffered.indexOf("\n\n");
      if (end >= 0) {
        const event = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        const data = event.split("\n").find((line) => line.startsWith("data: "));
        if (event.startsWith("event: snapshot") && data) return JSON.parse(data.slice(6));
        continue;
      }
      const left = deadline - Date.now();
      const read = await Promise.race([reader.read(), Bun.sleep(Math.max(0, left)).then(() => undefined)]);
      if (!read || read.done) throw new Error("no snapshot in time");
      buffered += decoder.decode(read.value, { stream: true });
    }
  };
}

test("a change stored with its catalogue event reaches its account's feed and every account's at once", async () => {
  const { accountId } = await newAccount();
  const ended = new AbortController();
  const open = (viewer: Viewer, account: string | undefined) =>
    snapshots(liveFeed(new Request("http://console/live", { signal: ended.signal }), viewer, account, "streams"));
  try {
    const feeds = [
      open({ kind: "account", sessionId: randomUUID(), name: "account", accountId }, accountId),
      open({ kind: "operator", sessionId: randomUUID(), name: "operator" }, undefined),
    ];
    for (const next of feeds) await next(Date.now() + 10_000);

    // A stream that started, written as a transition writes it: the row and its event in one transaction.
    const room = `live-${randomUUID().slice(0, 8)}`;
    const changedAt = Date.now();
    const id = randomUUID();
    await db.transaction(async (tx) => {
      const [row] = await tx
        .insert(streams)
        .values({
          id,
          accountId,
          room,
          streamName: `${room}-abcd`,
          state: "running",
          startedAt: new Date(),
          options: optionsOf({ room_name: room }),
        })
        .returning();
      await recordEvent(tx, accountId, "stream.started", {
        stream_id: row!.id,
        stream_name: row!.streamName,
        room,
        recording: false,
      });
    });
    const latencies = await Promise.all(
      feeds.map(async (next) => {
        for (;;) {
          const snapshot = await next(changedAt + 10_000);
          if (snapshot.streams.some((stream) => stream.id === id)) return Date.now() - changedAt;
        }
      }),
    );
    expect(latencies.filter((ms) => ms >= PROMPT_MS)).toEqual([]);
  } finally {
    ended.abort();
  }
});
