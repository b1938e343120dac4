/**
 * Queue and job names with their payload types, declared once for producers and workers.
 */
import type { JobsOptions, Queue, QueueOptions, Worker } from "bullmq";
import { config } from "../core/config";
import { log } from "../core/log";
import { closeClient, createRedis, onCluster, type RedisClient, settledWithin, withinRedis } from "./connection";

export const QUEUE_NAMES = {
  recorder: "recorder",
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

/** How every start job is queued, first or offered again: one per stream, gone from Redis once it ends. */
export function startJobOptions(streamId: string): JobsOptions {
  return {
    jobId: `start-${streamId}`,
    attempts: 1,
    // The job holds stream keys: it leaves Redis the moment it ends, either way.
    removeOnComplete: true,
    removeOnFail: true,
  };
}

/**
 * Producers, made on first use with BullMQ loaded then: loading it was a third of the CPU an
 * API process spends loading its modules, and most processes never queue a job.
 */
const queues = new Map<QueueName, Promise<{ queue: Queue; connection: RedisClient }>>();

/**
 * On a Cluster the prefix is a hash tag, as BullMQ asks there: its scripts touch several keys of
 * a queue at once, all then on one slot. On one server it stays as it was, so queued jobs survive an upgrade.
 */
export function queueOptions(): QueueOptions {
  const prefix = `${config.redis.keyPrefix}:bull`;
  return { connection: createRedis("queue"), prefix: onCluster() ? `{${prefix}}` : prefix };
}

function producer(name: QueueName): Promise<{ queue: Queue; connection: RedisClient }> {
  let known = queues.get(name);
  if (!known) {
    known = import("bullmq").then(({ Queue }) => {
      const options = queueOptions();
      const queue = new Queue(name, options);
      // An 'error' event with no listener is thrown; a lost Redis connection is retried by ioredis.
      queue.on("error", (error) => log.warn({ queue: name, err: error.message }, "queue connection error"));
      return { queue, connection: options.connection as RedisClient };
    });
    queues.set(name, known);
  }
  return known;
}

export async function getQueue(name: QueueName): Promise<Queue> {
  return (await producer(name)).queue;
}

/**
 * Queues a job for a caller that is waiting: fails at once (RedisUnavailable, a 503) when the
 * queue's connection is lost, and after PROMPT_REDIS_MS when Redis does not answer, instead
 * of holding the caller until Redis is back. A job given up on that way may still be queued
 * once Redis returns, so its worker must check the database before acting on it.
 */
export async function enqueue<T>(name: QueueName, jobName: string, data: T, options: JobsOptions): Promise<void> {
  const { queue, connection } = await producer(name);
  await withinRedis(connection, `queueing ${name}/${jobName}`, () => queue.add(jobName, data, options));
}

/** Waiting, active and delayed jobs per queue, for /metrics; a queue whose Redis does not answer is left out. */
export async function queueDepths(): Promise<Record<string, Record<string, number>>> {
  const depths: Record<string, Record<string, number>> = {};
  for (const name of Object.values(QUEUE_NAMES)) {
    const { queue, connection } = await producer(name);
    const counts = await withinRedis(connection, `counting ${name} jobs`, () =>
      queue.getJobCounts("waiting", "active", "delayed", "failed"),
    ).catch(() => undefined);
    if (counts) depths[name] = counts;
  }
  return depths;
}

/** Closes the producers, without waiting on a Redis that is gone (their unsent commands are dropped). */
export async function closeQueues(): Promise<void> {
  const known = await Promise.all(queues.values());
  queues.clear();
  await Promise.all(
    known.map(async ({ queue, connection }) => {
      await settledWithin(queue.close(), 1_000);
      await closeClient(connection);
    }),
  );
}

/**
 * Stops a worker. While Redis answers it waits for the running jobs, as BullMQ does; once
 * Redis is lost it stops at once, since BullMQ's own close then waits for a reconnection
 * that may never come. A job cut short that way was never completed in Redis: it runs again
 * once Redis is back, and every job is idempotent.
 */
export async function closeWorker(worker: Worker, connection: RedisClient): Promise<void> {
  await worker.close(connection.status !== "ready");
}
