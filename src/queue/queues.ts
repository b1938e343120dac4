/**
 * Queue and job names with their payload types, declared once for producers and workers.
 */
import { Queue, type QueueOptions } from "bullmq";
import { config } from "../config";
import { createRedis } from "./connection";

export const QUEUE_NAMES = {
  recorder: "recorder",
  cdr: "cdr",
} as const;
export type QueueName = (typeof QUEUE_NAMES)[keyof typeof QUEUE_NAMES];

/** Jobs of the `recorder` queue. Each is idempotent: the stream's row says what is left to do. */
export const RECORDER_JOBS = {
  start: "start",
  stop: "stop",
} as const;

export interface RecorderStartJob {
  streamId: string;
  /**
   * Full RTMP URLs of the external destinations, stream keys included. They live only in
   * this job (removed from Redis as soon as it ends) and in the recorder's memory.
   */
  destinations: string[];
}

export interface RecorderStopJob {
  streamId: string;
  /** Why the stream stops, stored as its stop reason (`requested`, `timeout`, ...). */
  reason: string;
}

/** The cdr queue's one job kind: fold one stored conference event into the usage tables. */
export const CDR_FOLD_JOB = "fold-event";
export interface CdrFoldJob {
  eventId: number;
}

const queues = new Map<QueueName, Queue>();

export function queueOptions(): QueueOptions {
  return { connection: createRedis("queue"), prefix: `${config.redis.keyPrefix}:bull` };
}

export function getQueue(name: QueueName): Queue {
  let queue = queues.get(name);
  if (!queue) {
    queue = new Queue(name, queueOptions());
    queues.set(name, queue);
  }
  return queue;
}

/** Waiting, active and delayed jobs per queue, for /metrics. */
export async function queueDepths(): Promise<Record<string, Record<string, number>>> {
  const depths: Record<string, Record<string, number>> = {};
  for (const name of Object.values(QUEUE_NAMES)) {
    depths[name] = await getQueue(name).getJobCounts("waiting", "active", "delayed", "failed");
  }
  return depths;
}

export async function closeQueues(): Promise<void> {
  await Promise.all([...queues.values()].map((queue) => queue.close()));
  queues.clear();
}
