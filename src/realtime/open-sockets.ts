/**
 * The open sockets of this process, for what is done to all of them at once: the idle sweep
 * (one timer for every socket) and the drain at shutdown. Apart from socket.ts, which admits a
 * socket here when Bun opens it and lets it go when it closes.
 */
import type { ServerWebSocket } from "bun";
import { config } from "../core/config";
import { registeredChannels } from "./channel";
import { CLOSE_GOING_AWAY, SHUTTING_DOWN } from "./protocol";

/** What the sweep and the drain use of a socket. */
export interface OpenSocket {
  readonly lastSeen: number;
  readonly ws: ServerWebSocket<unknown>;
  /** Closes the socket once the frame in flight is answered, telling the client to reconnect. */
  restart(): Promise<void>;
}

/** A push taken back unstarted (a message not yet being stored) because the server is stopping. */
export class ShuttingDown extends Error {}

/** The open sockets of this process: for the idle sweep and the shutdown. */
const connections = new Set<OpenSocket>();
/** Set once, when the process begins to stop: no push is started after it. */
let draining = false;

export const isDraining = (): boolean => draining;
/** One timer for every socket. */
let sweeper: ReturnType<typeof setInterval> | undefined;

/** Closes sockets that have sent nothing, not even a heartbeat, within the idle timeout. */
function sweepIdle(): void {
  const limit = Date.now() - config.realtime.idleTimeoutSeconds * 1000;
  for (const connection of connections) {
    if (connection.lastSeen < limit) connection.ws.close(CLOSE_GOING_AWAY, "idle");
  }
}

/**
 * Stops the sockets of this process for a shutdown: pushes not yet started are answered with
 * an error, the ones in flight finish and are answered, then every client is closed with
 * 1012 so it reconnects (to another process). Resolves when all are closed.
 */
export async function drainConnections(): Promise<void> {
  draining = true;
  const reason = new ShuttingDown(SHUTTING_DOWN.message);
  for (const channel of registeredChannels()) channel.drain?.(reason);
  await Promise.all([...connections].map((connection) => connection.restart()));
}

/** Counts a socket Bun has opened; false while the process stops, when it must be closed at once. */
export function admit(socket: OpenSocket): boolean {
  if (draining) return false;
  connections.add(socket);
  if (!sweeper) {
    sweeper = setInterval(sweepIdle, Math.min(5_000, (config.realtime.idleTimeoutSeconds * 1000) / 4));
    sweeper.unref?.();
  }
  return true;
}

/** Forgets a closed socket; false when it was never admitted (or already forgotten). */
export function dismiss(socket: OpenSocket): boolean {
  if (!connections.delete(socket)) return false;
  if (connections.size === 0 && sweeper) {
    clearInterval(sweeper);
    sweeper = undefined;
  }
  return true;
}
