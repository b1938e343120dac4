/**
 * What recorder workers say of themselves in Redis, and the recorder metrics for autoscalers:
 * units free and used per worker (from those reports), queue depth and units per priority and the wait
 * of queued starts (from the database, which keeps the queue).
 */
import { and, eq, isNotNull, sql } from "drizzle-orm";
import { db } from "../../db/client";
import { label } from "../../http/metrics";
import { promptRedis, redisKey, tagged, withinRedis } from "../../queue/connection";
import { MAX_PRIORITY, streams } from "./schema";

/**
 * A worker's heartbeat mark: present while it is alive. It and the room hash leave in one
 * transaction (heartbeat.ts): on a Cluster they share a slot.
 */
export const recorderPodKey = (pod: string) => redisKey(tagged("recorder"), "pod", pod);

/** Every worker's room by pod: `<units free> <slots free> <units budget>`. */
export const recorderRoomKey = () => redisKey(tagged("recorder"), "room");

export interface Room {
  /** Units free: the budget less what its streams and the starts under way hold. */
  units: number;
  slots: number;
  /** STREAMING_WORKER_UNITS of that worker. */
  budget: number;
}

export const formatRoom = (room: Room) => `${room.units} ${room.slots} ${room.budget}`;

export function parseRoom(value: string): Room {
  const [units, slots, budget] = value.split(" ").map(Number);
  return { units: units!, slots: slots!, budget: budget ?? Number.NaN };
}

/** Upper bounds of the queue wait buckets, in seconds: from the 2 s a freed unit allows to a long wait. */
const WAIT_BUCKETS = [0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600];

async function unitLines(): Promise<string[]> {
  const reports = await withinRedis(promptRedis(), "reading recorder room", () =>
    promptRedis().hgetall(recorderRoomKey()),
  );
  const pods = Object.keys(reports);
  // A worker killed leaves its report until another finds it dead: only live workers are shown.
  const alive =
    pods.length === 0
      ? []
      : await withinRedis(promptRedis(), "reading recorder heartbeats", () =>
          Promise.all(pods.map((pod) => promptRedis().exists(recorderPodKey(pod)))),
        );
  const free = [
    "# HELP parley_recorder_units_free Cost units a live recorder worker has free.",
    "# TYPE parley_recorder_units_free gauge",
  ];
  const used = [
    "# HELP parley_recorder_units_used Cost units a live recorder worker's streams and starts under way hold.",
    "# TYPE parley_recorder_units_used gauge",
  ];
  pods.forEach((pod, i) => {
    if (alive[i] !== 1) return;
    const room = parseRoom(reports[pod]!);
    free.push(`parley_recorder_units_free{pod="${label(pod)}"} ${room.units}`);
    if (Number.isFinite(room.budget))
      used.push(`parley_recorder_units_used{pod="${label(pod)}"} ${room.budget - room.units}`);
  });
  return [...free, ...used];
}

async function queueLines(): Promise<string[]> {
  const depths = await db
    .select({
      priority: streams.priority,
      count: sql<number>`count(*)::int`,
      units: sql<number>`sum(${streams.units})::int`,
    })
    .from(streams)
    .where(eq(streams.state, "queued"))
    .groupBy(streams.priority);
  const lines = [
    "# HELP parley_recorder_queue_depth Starts waiting for a recorder worker with room, by priority.",
    "# TYPE parley_recorder_queue_depth gauge",
  ];
  const units = [
    "# HELP parley_recorder_queue_units Cost units of the starts waiting, by priority: what more recorders must hold.",
    "# TYPE parley_recorder_queue_units gauge",
  ];
  // Every priority, 0 when none waits, so a series never vanishes under an autoscaler's query.
  for (let priority = 0; priority <= MAX_PRIORITY; priority++) {
    const row = depths.find((depth) => depth.priority === priority);
    lines.push(`parley_recorder_queue_depth{priority="${priority}"} ${row?.count ?? 0}`);
    units.push(`parley_recorder_queue_units{priority="${priority}"} ${row?.units ?? 0}`);
  }
  lines.push(...units);
  // A queued stream has its turn set; the wait runs from its start request to its recorder publishing.
  const wait = sql`extract(epoch from ${streams.startedAt} - ${streams.createdAt})`;
  const [counts] = await db
    .select({
      buckets: sql<number[]>`array[${sql.join(
        WAIT_BUCKETS.map((bound) => sql`(count(*) filter (where ${wait} <= ${bound}))::int`),
        sql`, `,
      )}]`,
      count: sql<number>`count(*)::int`,
      sum: sql<number>`coalesce(sum(${wait}), 0)::float8`,
    })
    .from(streams)
    .where(and(isNotNull(streams.queueTurn), isNotNull(streams.startedAt)));
  lines.push(
    "# HELP parley_recorder_queue_wait_seconds From a queued start's request to its stream running.",
    "# TYPE parley_recorder_queue_wait_seconds histogram",
  );
  WAIT_BUCKETS.forEach((bound, i) => {
    lines.push(`parley_recorder_queue_wait_seconds_bucket{le="${bound}"} ${counts!.buckets[i]}`);
  });
  lines.push(
    `parley_recorder_queue_wait_seconds_bucket{le="+Inf"} ${counts!.count}`,
    `parley_recorder_queue_wait_seconds_sum ${counts!.sum}`,
    `parley_recorder_queue_wait_seconds_count ${counts!.count}`,
  );
  return lines;
}

/** The recorder metrics; without Redis the per-worker units are left out, the queue's are still shown. */
export async function recorderMetrics(): Promise<string[]> {
  const [units, queue] = await Promise.all([unitLines().catch(() => []), queueLines()]);
  return [...units, ...queue];
}
