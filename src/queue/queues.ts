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
