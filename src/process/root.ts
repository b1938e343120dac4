/**
 * The composition root of a Parley process: the one place that builds the services the process
 * needs (the database, Redis's connections and queues, publish/subscribe, the outbox, the object
 * store, the real-time broker), puts them in place for the features and workers, and stops them in reverse
 * order of building. Whether a service is local or on Redis is decided here and nowhere else:
 * where every role runs in this one process (the embedded database, which no other process can
 * open) there is nobody else to tell, so publish/subscribe and the broker stay in the process.
 *
 * The supervisor, a role started alone, the SIP gateway alone, the command line's direct mode
 * and the tests (test/setup.ts) all build their process here.
 */
import { config } from "../core/config";
import { whenStopping } from "../core/lifecycle";
import { log } from "../core/log";
import type { ObjectStore } from "../core/objects";
import type { Outbox } from "../core/outbox";
import { LocalPubSub, type PubSub } from "../core/pubsub";
import { type DatabaseHandle, openDatabase, useDatabase } from "../db/client";
import { abandonLostConnections, closeRedis, promptRedis } from "../queue/connection";
import { createProcessOutbox, useOutbox } from "../outbox/outbox";
import { closeQueues } from "../queue/queues";
import { redisPubSub, usePubSub } from "../queue/redis-pubsub";
import type { Broker } from "../realtime/broker";
import { useBroker } from "../realtime/process-broker";
import { createObjectStore, useObjects } from "../storage/objects";

/** What was built, each with how it stops: the last built stops first. */
export class Stoppers {
  private readonly stack: Array<{ what: string; stop: () => unknown }> = [];

  push(what: string, stop: () => unknown): void {
    this.stack.push({ what, stop });
  }

  /** What is still to stop, the next first. */
  pending(): string[] {
    return this.stack.map(({ what }) => what).reverse();
  }

  /**
   * Stops everything in reverse order of building, each once. One that fails does not keep
   * those built before it open: they still stop, and the first failure is raised at the end.
   */
  async stop(): Promise<void> {
    let failure: unknown;
    for (let next = this.stack.pop(); next; next = this.stack.pop()) {
      try {
        await next.stop();
      } catch (error) {
        log.warn({ what: next.what, err: (error as Error).message }, "could not stop cleanly");
        failure ??= error;
      }
    }
    if (failure !== undefined) throw failure;
  }
}

/**
 * What a process is built for: a role's name (src/process/roles.ts), several roles' names joined by commas
 * (`recorder,sip,cdr,webhooks`: the worker roles in one process), the supervisor, or one command.
 */
export type ProcessKind = string;

/**
 * The process's PostgreSQL pool: DATABASE_POOL_SIZE for each role it runs, as many connections as the roles
 * would hold in processes of their own. A shared pool of one role's size would leave the SIP gateway's look-ups
 * waiting behind the webhook deliveries' transactions (up to half of it) and the cdr folds (CDR_WORKER_CONCURRENCY).
 */
function poolSizeOf(kind: ProcessKind): number {
  return config.database.poolSize * kind.split(",").length;
}

export interface ProcessServices {
  readonly kind: ProcessKind;
  /** Every role of this Parley runs in this process: the embedded database is one process's alone. */
  readonly alone: boolean;
  readonly database: DatabaseHandle;
  readonly pubsub: PubSub;
  readonly outbox: Outbox;
  /** The account media store on the S3 bucket (its client made at its first use). */
  readonly objects: ObjectStore;
  /** The real-time broker, in a process that serves the API. */
  readonly broker: Broker | undefined;
  /** What was built; a role pushes what it starts, to be stopped before what it stands on. */
  readonly stoppers: Stoppers;
  /** Stops everything built, in reverse order, and takes the services out of place. */
  stop(): Promise<void>;
}

/**
 * How sockets on several API processes reach each other. `auto` is local when this is the only
 * API process: every role in this one process, or API_PROCESSES=1 (which the supervisor's API
 * processes inherit); Redis otherwise. Several hosts with one API process each say REALTIME_BROKER=redis.
 */
export function brokerKind(alone: boolean): "local" | "redis" {
  if (config.realtime.broker !== "auto") return config.realtime.broker;
  return alone || config.http.processes === 1 ? "local" : "redis";
}

/** A command's process holds no sockets and its commands announce nothing to topics: its own broker is enough. */
function brokerOf(kind: ProcessKind, alone: boolean): "local" | "redis" {
  return kind === "command" ? "local" : brokerKind(alone);
}

/** Builds the process's services, in the order they stand on each other, and puts them in place. */
export async function buildProcess(kind: ProcessKind): Promise<ProcessServices> {
  const stoppers = new Stoppers();
  const database = await openDatabase({ ...config.database, poolSize: poolSizeOf(kind) });
  useDatabase(database);
  stoppers.push("database", async () => {
    await database.close();
    useDatabase(undefined);
  });
  const alone = database.kind === "pglite";

  // The command connection for requests is made here: a Redis that cannot be reached is then said at the start,
  // before the API answers, even where nothing subscribes on it (the embedded database). The others are made
  // on first use, each by what needs it; all are closed here, after everything that uses them.
  promptRedis();
  stoppers.push("redis connections", closeRedis);
  // Nothing of a stop may wait for a Redis that is gone: commands queued on a lost connection fail at once.
  whenStopping(() => {
    const abandoned = abandonLostConnections();
    if (abandoned > 0) log.warn({ connections: abandoned }, "Redis is unreachable: stopping without it");
  });
  stoppers.push("queues", closeQueues);

  const pubsub: PubSub = alone ? new LocalPubSub() : redisPubSub;
  usePubSub(pubsub);
  stoppers.push("publish/subscribe", () => usePubSub(undefined));

  const outbox = createProcessOutbox(pubsub);
  useOutbox(outbox);
  stoppers.push("outbox", () => useOutbox(undefined));

  const objects = createObjectStore();
  useObjects(objects);
  stoppers.push("object store", async () => {
    useObjects(undefined);
    await objects.close();
  });

  const servesApi = kind === "api" || kind === "command" || (kind === "supervisor" && alone);
  let broker: Broker | undefined;
  if (servesApi) {
    // Loaded only here: a worker's process never loads the socket's side.
    const built =
      brokerOf(kind, alone) === "redis"
        ? new (await import("../realtime/redis-broker")).RedisBroker()
        : new (await import("../realtime/local-broker")).LocalBroker();
    broker = built;
    useBroker(built);
    stoppers.push("broker", async () => {
      await built.close();
      useBroker(undefined);
    });
  }
  log.debug(
    { kind, alone, pubsub: alone ? "local" : "redis", broker: broker && brokerOf(kind, alone) },
    "process built",
  );

  return { kind, alone, database, pubsub, outbox, objects, broker, stoppers, stop: () => stoppers.stop() };
}
