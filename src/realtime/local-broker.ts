/**
 * The broker (broker.ts) for a single process. Delivery inside a process always goes
 * through Bun's native topic publish, so a frame is serialised once however many sockets
 * receive it; the Redis broker (redis-broker.ts) delivers here first too.
 */
import type { Server, ServerWebSocket } from "bun";
import type { Broker, PresenceEntry } from "./broker";

/** The Bun servers of this process that hold sockets (one, except in tests and benchmarks). */
const servers = new Set<Server<unknown>>();

export function attachServer(server: Server<unknown>): void {
  servers.add(server);
}

export function deliverLocally(topic: string, frame: string, except?: ServerWebSocket<unknown>): void {
  if (except) {
    // A socket's own publish reaches every other subscriber of its server but not itself.
    except.publish(topic, frame);
    return;
  }
  for (const server of servers) server.publish(topic, frame);
}

export class LocalBroker implements Broker {
  private readonly entries = new Map<string, Map<string, PresenceEntry>>();

  async broadcast(topic: string, frame: string, except?: ServerWebSocket<unknown>) {
    deliverLocally(topic, frame, except);
  }

  /** One process: its sockets had every frame when broadcast returned. */
  async handedOn() {}

  async subscribe() {}

  async unsubscribe() {}

  async track(topic: string, entry: PresenceEntry) {
    const byRef = this.entries.get(topic) ?? new Map<string, PresenceEntry>();
    this.entries.set(topic, byRef);
    byRef.set(entry.meta.phx_ref, entry);
  }

  async untrack(topic: string, ref: string) {
    const byRef = this.entries.get(topic);
    byRef?.delete(ref);
    if (byRef?.size === 0) this.entries.delete(topic);
  }

  async presence(topic: string) {
    return [...(this.entries.get(topic)?.values() ?? [])];
  }

  async close() {
    this.entries.clear();
  }
}
