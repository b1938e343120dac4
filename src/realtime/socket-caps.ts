/**
 * What the process's sockets hold, counted for the caps and for /metrics: a slot per open socket
 * (per token, user, account and process), and the topics every socket has joined. Apart from
 * socket.ts, which takes and gives the slots, so the caps' definitions sit in one short place
 * (docs/limits.md#caps).
 */
import { config } from "../core/config";
import { reportHeld } from "../http/metrics";
import { HeldResource } from "../modules/limits";

/** Open sockets, counted from the upgrade's check to the socket's close (docs/limits.md#caps). */
export const socketCaps = new HeldResource({
  resource: "sockets",
  what: "sockets",
  perProcess: { name: "sockets.per_process", cap: () => config.limits.held.socketsPerProcess },
  callers: [
    { name: "sockets.per_token", per: "token", cap: () => config.limits.held.socketsPerToken, refusal: 429 },
    { name: "sockets.per_user", per: "user", cap: () => config.limits.held.socketsPerUser, refusal: 429 },
    // Tokens are minted freely for any user id, so only the account bounds what one tenant takes of a process.
    { name: "sockets.per_account", per: "account", cap: () => config.limits.held.socketsPerAccount, refusal: 429 },
  ],
  retryAfterSeconds: 5,
  free: "close one",
});

/**
 * An upgrade Bun took but never opened (the peer went before the handshake finished) gives its
 * slot back after this long; the timer is cleared when the socket opens.
 */
export const UNOPENED_MS = 10_000;

/** Topics joined by every socket of this process, and joins refused at LIMIT_TOPICS_PER_SOCKET, for /metrics. */
export const topicCounts = { joined: 0, refused: 0 };
reportHeld(() => ({
  resource: "socket_topics",
  inUse: topicCounts.joined,
  caps: { socket: config.limits.held.topicsPerSocket },
  refused: { "socket.topics": topicCounts.refused },
}));
