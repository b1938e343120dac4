/**
 * The broker that carries this process's frames and presence: `LocalBroker` (local-broker.ts) for
 * a single process, `RedisBroker` (redis-broker.ts) when other API processes hold sockets too.
 * Chosen and built by the process's composition root (src/process/root.ts), which closes it.
 */
import { installed } from "../core/installed";
import type { Broker } from "./broker";

export const broker = installed<Broker>("the process's real-time broker");

export function useBroker(chosen: Broker | undefined): void {
  broker.install(chosen);
}
