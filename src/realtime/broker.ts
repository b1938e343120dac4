/**
 * What a broker does: carries a process's socket frames and presence to every process
 * holding sockets. `LocalBroker` (local-broker.ts) serves a single process, `RedisBroker`
 * (redis-broker.ts) several; process-broker.ts chooses one.
 */
import type { ServerWebSocket } from "bun";

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
  /**
   * Settles once every frame broadcast so far is with the other processes' carrier (Redis has
   * taken it), or could not be; never rejects, and waits at most a bounded time. A caller that
   * acknowledges a message waits for this first, so a process that dies right after its
   * acknowledgement has already handed the message to the sockets of other processes.
   */
  handedOn(): Promise<void>;
  /** This process has a socket on `topic` (counted; resolves once frames from elsewhere will arrive). */
  subscribe(topic: string): Promise<void>;
  unsubscribe(topic: string): Promise<void>;
  track(topic: string, entry: PresenceEntry): Promise<void>;
  untrack(topic: string, ref: string): Promise<void>;
  presence(topic: string): Promise<PresenceEntry[]>;
  close(): Promise<void>;
}
