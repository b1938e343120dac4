/**
 * A recorder worker's state with no recorder behind it (workers/recorder/local.ts), for tests
 * that call a worker's job functions directly: the worker is what these fields say it is.
 */
import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import { pubsub } from "../../src/queue/redis-pubsub";
import type { RecorderDriver } from "../../workers/recorder/driver";
import type { RecorderHost } from "../../workers/recorder/local";

/** A worker named `<name>-<random>` on this machine, running nothing; `fields` override. */
export function recorderHost(name: string, fields: Partial<RecorderHost> = {}): RecorderHost {
  return {
    pod: `${name}-${randomUUID().slice(0, 8)}`,
    host: hostname(),
    driver: {} as RecorderDriver,
    pubsub: pubsub(),
    local: new Map(),
    reserved: 0,
    reservedUnits: 0,
    roomFreed: () => {},
    closing: false,
    ...fields,
  };
}
