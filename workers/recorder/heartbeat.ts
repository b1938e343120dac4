/**
 * A recorder worker's heartbeat: a mark in Redis that says it is alive, so any worker can tell
 * whether the owner of a stream is still there to stop it, or lost with its streams.
 */
import { config } from "../../src/core/config";
import { log } from "../../src/core/log";
import { formatRoom, parseRoom, type Room, recorderPodKey, recorderRoomKey } from "../../src/modules/streaming";
import { redis, withinRedis } from "../../src/queue/connection";

/**
 * A worker silent for STREAMING_RECORDER_LOST_MS is gone; its streams are reconciled. It beats
 * three times in that span, so one or two beats lost to a slow Redis do not make it look gone.
 */
const beatEveryMs = (ttlMs: number) => Math.round((ttlMs * 3) / 10);

const podKey = recorderPodKey;

/**
 * Fails while Redis is away rather than waiting for it: an answer
 * from a Redis that came back empty would say every worker is dead.
 */
export async function podAlive(pod: string): Promise<boolean> {
  return (await withinRedis(redis(), "reading a recorder heartbeat", () => redis().exists(podKey(pod)))) === 1;
}

/** Every worker's free room by pod, so a full worker can tell whether another may take a start. */
const roomKey = recorderRoomKey;

/** Best effort: a report lost leaves the last one, renewed with every beat. */
export async function reportRoom(pod: string, room: Room): Promise<void> {
  await withinRedis(redis(), "reporting recorder room", () => redis().hset(roomKey(), pod, formatRoom(room))).catch(
    () => 0,
  );
}

/**
 * A live worker other than `pod` that last said it had room for `cost`, if any. Any doubt
 * (Redis away) answers none, so the start is queued, which the database keeps, rather than left waiting.
 */
export async function otherWithRoom(pod: string, cost: number): Promise<string | undefined> {
  const rooms = await withinRedis(redis(), "reading recorder room", () => redis().hgetall(roomKey())).catch(
    () => ({}) as Record<string, string>,
  );
  for (const [other, value] of Object.entries(rooms)) {
    const { units, slots } = parseRoom(value);
    if (other === pod || !(units >= cost && slots > 0)) continue;
    if (await podAlive(other).catch(() => false)) return other;
    // A worker gone without a word leaves its report: removed by whoever finds it dead.
    await withinRedis(redis(), "removing a lost worker's room", () => redis().hdel(roomKey(), other)).catch(() => 0);
  }
  return undefined;
}

export interface Heartbeat {
  /** Whether this worker may now take another for dead by its missing heartbeat. */
  othersJudgeable(): boolean;
  /** Stops beating and removes the mark; without Redis the mark expires by itself (STREAMING_RECORDER_LOST_MS). */
  stop(): Promise<void>;
}

/** Beats once before it answers, then every 3/10 of STREAMING_RECORDER_LOST_MS. */
export async function startHeartbeat(pod: string, host: string, room: () => Room): Promise<Heartbeat> {
  const ttlMs = config.streaming.lostAfterMs;
  /**
   * From when this worker may take another for dead by its missing heartbeat: at once on start,
   * as before. Once its own heartbeat has failed (Redis away; a Redis restarted empty has lost
   * every worker's heartbeat), only after its beats have gone through again for a whole
   * STREAMING_RECORDER_LOST_MS, by which time every live worker has beaten again.
   */
  let judgeFrom: number | undefined = Date.now();
  const beat = async () => {
    try {
      await withinRedis(redis(), "recorder heartbeat", () => redis().set(podKey(pod), host, "PX", ttlMs));
      await reportRoom(pod, room());
      judgeFrom ??= Date.now() + ttlMs;
    } catch (error) {
      if (judgeFrom !== undefined)
        log.warn(
          { err: (error as Error).message },
          "recorder heartbeat failed; no other worker is judged lost until it is back",
        );
      judgeFrom = undefined;
    }
  };
  /**
   * Redis lost between two beats counts as a failed beat: a failover or a restart shorter than
   * a beat's period failed no beat of this worker, yet the others' beats may have failed
   * meanwhile (or a Redis restarted empty lost their marks), and they were judged lost at once.
   */
  const connectionLost = () => {
    judgeFrom = undefined;
  };
  redis().on("close", connectionLost);
  await beat();
  const timer = setInterval(() => void beat(), beatEveryMs(ttlMs));
  return {
    othersJudgeable: () => judgeFrom !== undefined && Date.now() >= judgeFrom,
    async stop() {
      clearInterval(timer);
      redis().off("close", connectionLost);
      await withinRedis(redis(), "removing the heartbeat", () =>
        redis().multi().del(podKey(pod)).hdel(roomKey(), pod).exec(),
      ).catch(() => 0);
    },
  };
}
