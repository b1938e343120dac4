/**
 * LL-HLS viewers counted as clients, not requests. The multivariant playlist gives each
 * player a viewer id in its media playlist addresses; players keep it on every reload
 * (blocking reloads add their directives beside it). A viewer is marked seen in a sorted
 * set per stream, at most once per SEEN_EVERY_MS per process however often it reloads, and
 * joins the stream's viewer count (viewers.ts) when first marked; one not seen for
 * GONE_AFTER_MS leaves it. Whichever process removes the mark (ZREM is atomic) counts the leave.
 */
import { randomBytes } from "node:crypto";
import { log } from "../../../core/log";
import { promptRedis, redisKey, withinRedis } from "../../../queue/connection";
import { LIVE_STATES, streamByName } from "../stream";
import { changeViewers } from "../viewers";

const SEEN_EVERY_MS = 5_000;
/** Players reload several times a second; silence this long means the player is gone. */
const GONE_AFTER_MS = 20_000;
const VIEWER_ID = /^[A-Za-z0-9_-]{8,32}$/;

const seenKey = (stream: string) => redisKey("llhls", stream, "seen");
const lastMarked = new Map<string, number>();
/** Streams this process marked viewers of, and when it last did: it sweeps their sets. */
const swept = new Map<string, number>();
let sweeper: ReturnType<typeof setInterval> | undefined;

export function newViewerId(): string {
  return randomBytes(12).toString("base64url");
}

export function isViewerId(value: string | undefined): value is string {
  return value !== undefined && VIEWER_ID.test(value);
}

const client = (viewer: string) => `llhls/${viewer}`;

async function change(streamName: string, viewer: string, how: "add" | "remove"): Promise<void> {
  const stream = await streamByName(streamName);
  if (stream && (how === "remove" || LIVE_STATES.includes(stream.state)))
    await changeViewers(stream, how, client(viewer));
}

/** A viewer's request; counting never holds it up, and a Redis away leaves it uncounted. */
export function viewerSeen(stream: string, viewer: string): void {
  const now = Date.now();
  const key = `${stream} ${viewer}`;
  if (now - (lastMarked.get(key) ?? 0) < SEEN_EVERY_MS) return;
  lastMarked.set(key, now);
  swept.set(stream, now);
  sweeper ??= setInterval(() => void sweep(), SEEN_EVERY_MS);
  sweeper.unref?.();
  void withinRedis(promptRedis(), "marking an LL-HLS viewer", async () => {
    const added = await promptRedis().zadd(seenKey(stream), now, viewer);
    await promptRedis().pexpire(seenKey(stream), GONE_AFTER_MS * 3);
    return added;
  })
    .then((added) => (added === 1 ? change(stream, viewer, "add") : undefined))
    .catch((error: Error) => log.warn({ stream, err: error.message }, "LL-HLS viewer not counted"));
}

/** Viewers gone silent leave the count. */
export async function sweep(now = Date.now()): Promise<void> {
  for (const [key, at] of lastMarked) if (now - at > GONE_AFTER_MS) lastMarked.delete(key);
  for (const [stream, at] of swept) {
    // A stream keeps being swept until its last viewer has had time to go.
    if (now - at > GONE_AFTER_MS * 2) swept.delete(stream);
    try {
      const gone = await withinRedis(promptRedis(), "reading LL-HLS viewers", () =>
        promptRedis().zrangebyscore(seenKey(stream), 0, now - GONE_AFTER_MS),
      );
      for (const viewer of gone) {
        if ((await promptRedis().zrem(seenKey(stream), viewer)) === 1) await change(stream, viewer, "remove");
      }
    } catch (error) {
      log.warn({ stream, err: (error as Error).message }, "LL-HLS viewers not swept");
    }
  }
}

export function stopViewerSweeps(): void {
  clearInterval(sweeper);
  sweeper = undefined;
}
