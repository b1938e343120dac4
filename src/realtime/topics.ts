/** Topic names, and the one way other modules announce something to a room's sockets. */
import { log } from "../core/log";
import { broker } from "./broker";
import { broadcastFrame } from "./protocol";

export const chatTopic = (channelId: string) => `chat:${channelId}`;
export const rtcTopic = (channelId: string) => `rtc:${channelId}`;

/** Clients name topics per account; inside Parley a topic is scoped by its account, so equal names never meet. */
export function accountTopic(accountId: string, topic: string): string {
  return `${accountId}/${topic}`;
}

/**
 * Broadcasts an event to a chat room's sockets on every process. The change it reports is
 * already stored, so a broker failure is logged rather than failing the caller's request.
 */
export async function announceToRoom(accountId: string, channelId: string, event: string, payload: unknown): Promise<void> {
  const topic = chatTopic(channelId);
  try {
    await broker().broadcast(accountTopic(accountId, topic), broadcastFrame(topic, event, payload));
  } catch (error) {
    log.warn({ err: (error as Error).message, event }, "realtime: broadcast failed");
  }
}
