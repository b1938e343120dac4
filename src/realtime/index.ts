/**
 * What a feature needs to own a socket channel: the channel interface, the relay channel, payload
 * checks, and publishing to a topic. The socket's route is in ./routes.ts, mounted by the app,
 * where each feature's channel is registered.
 */
export { assertModel } from "./payloads";
export type { Answer, Channel, Member } from "./channel";
export { relayChannel } from "./relay";
export { broadcastsHandedOn, publish } from "./topics";
