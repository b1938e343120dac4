/**
 * A recorder worker's heartbeat: a mark in Redis that says it is alive, so any worker can tell
 * whether the owner of a stream is still there to stop it, or lost with its streams.
 */
import { log } from "../../src/core/log";
import { redis, redisKey, withinRedis } from "../../src/queue/connection";

const HEARTBEAT_MS = 3_000;
/** A worker silent this long is gone; its streams are reconciled. */
const HEARTBEAT_TTL_MS = 10_000;

const podKey = (pod: string) => redisKey("recorder", "pod", pod);

/**
 * Fails while Redis is away rather than waiting for it: an answer
 * from a Redis that came back empty would say every worker is dead.
 */
export async function podAlive(pod: string): Promise<boolean> {
  return (await withinRedis(redis(), "reading a recorder heartbeat", () => redis().exists(podKey(pod)))) === 1;
}

export interface Heartbeat {
  /** Whether this worker may now take another for dead by its missing heartbeat. */
  othersJudgeable(): boolean;
  /** Stops beating and removes the mark; without Redis the mark expires by itself (HEARTBEAT_TTL_MS). */
  stop(): Promise<void>;
}

/** Beats once before it answers, then every HEARTBEAT_MS. */
export async function startHeartbeat(pod: string, host: string): Promise<Heartbeat> {
  /**
   * From when this worker may take another for dead by its missing heartbeat: at once on start,
   * as before. Once its own heartbeat has failed (Redis away; a Redis restarted empty has lost
   * every worker's heartbeat), only after its beats have gone through again for a whole
   * HEARTBEAT_TTL_MS, by which time every live worker has beaten again.
   */
  let judgeFrom: number | undefined = Date.now();
  const beat = async () => {
    try {
      await withinRedis(redis(), "recorder heartbeat", () => redis().set(podKey(pod), host, "PX", HEARTBEAT_TTL_MS));
      judgeFrom ??= Date.now() + HEARTBEAT_TTL_MS;
    } catch (error) {
      if (judgeFrom !== undefined)
        log.warn(
          { err: (error as Error).message },
          "recorder heartbeat failed; no other worker is judged lost until it is back",
        );
      judgeFrom = undefined;
    }
  };
  await beat();
  const timer = setInterval(() => void beat(), HEARTBEAT_MS);
  return {
    othersJudgeable: () => judgeFrom !== undefined && Date.now() >= judgeFrom,
    async stop() {
      clearInterval(timer);
      await withinRedis(redis(), "removing the heartbeat", () => redis().del(podKey(pod))).catch(() => 0);
    },
  };
}
