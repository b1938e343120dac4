/**
 * Which broker carries a process's frames and presence: `LocalBroker` (local-broker.ts) for
 * a single process, `RedisBroker` (redis-broker.ts) when other API processes hold sockets too.
 */
import { config } from "../core/config";
import type { Broker } from "./broker";
import { LocalBroker } from "./local-broker";
import { RedisBroker } from "./redis-broker";

let chosen: Broker | undefined;
/**
 * Set by whoever assembles the app: this process holds every
 * socket (all roles in one process on the embedded database).
 */
let singleProcess = false;

export function setSingleProcess(single: boolean): void {
  singleProcess = single;
}

/**
 * `auto` is local when this is the only API process: everything in one process (see
 * setSingleProcess) or API_PROCESSES=1 (which the supervisor's API processes inherit); Redis
 * otherwise. Several hosts with one API process each must say REALTIME_BROKER=redis.
 */
export function brokerKind(): "local" | "redis" {
  if (config.realtime.broker !== "auto") return config.realtime.broker;
  return singleProcess || config.http.processes === 1 ? "local" : "redis";
}

/** The process's broker, chosen once from REALTIME_BROKER. */
export function broker(): Broker {
  if (!chosen) chosen = brokerKind() === "redis" ? new RedisBroker() : new LocalBroker();
  return chosen;
}

export async function closeBroker(): Promise<void> {
  await chosen?.close();
  chosen = undefined;
}
