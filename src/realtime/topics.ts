/** Topics inside Parley, and the one way other modules announce something to a topic's sockets. */
import { log } from "../core/log";
import { broker } from "./process-broker";
import { broadcastFrame } from "./protocol";

/** Clients name topics per account; inside Parley a topic is scoped by its account, so equal names never meet. */
export function accountTopic(accountId: string, topic: string): string {
  return `${accountId}/${topic}`;
}

/** Settles once every broadcast so far is with the other processes (see Broker.handedOn). */
export function broadcastsHandedOn(): Promise<void> {
  return broker().handedOn();
}

/**
 * Broadcasts an event to the account's sockets on `topic` (as clients name it) on every
 * process. The change it reports is already stored, so a broker failure is logged rather
 * than failing the caller's request.
 */
export async function publish(accountId: string, topic: string, event: string, payload: unknown): Promise<void> {
  try {
    await broker().broadcast(accountTopic(accountId, topic), broadcastFrame(topic, event, payload));
  } catch (error) {
    log.warn({ err: (error as Error).message, event }, "realtime: broadcast failed");
  }
}
