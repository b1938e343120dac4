/**
 * The broker interface, and its implementation for a single process. Delivery inside a
 * process always goes through Bun's native topic publish, so a frame is serialised once
 * however many sockets receive it; the Redis broker (redis-broker.ts) delivers here first too.
 */
import type { Server, ServerWebSocket } from "bun";

/** A presence entry: Phoenix groups entries by key (the user id) into `{ metas: [...] }`. */
export interface PresenceEntry {
  key: string;
  meta: Record<string, unknown> & { phx_ref: string };
}

export interface Broker {
  /**
   * Sends a frame to every socket on `topic`, on every process; `except` is left out. This
   * process's sockets have it when the call returns; frames for other processes are handed
   * on in the order of the calls, and the promise settles once they are (it rejects when
   * they cannot be: Redis is unreachable).
   */
  broadcast(topic: string, frame: string, except?: ServerWebSocket<unknown>): Promise<void>;
  /** This process has a socket on `topic` (counted; resolves once frames from elsewhere will arrive). */
  subscribe(topic: string): Promise<void>;
  unsubscribe(topic: string): Promise<void>;
  track(topic: string, entry: PresenceEntry): Promise<void>;
  untrack(topic: string, ref: string): Promise<void>;
  presence(topic: string): Promise<PresenceEntry[]>;
  close(): Promise<void>;
}

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
