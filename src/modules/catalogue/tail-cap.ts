/**
 * The cap on open tails, which the HTTP side takes a slot of for each event stream
 * (routes.ts) and each socket `events:` topic (channel.ts). It is apart from the tail itself
 * (stream.ts), which the console's live feed follows too, so that following the log loads no
 * caps of the limits module: the catalogue's index stays free of Elysia (docs/testing.md).
 */
import { config } from "../../core/config";
import { HeldResource } from "../limits";

/**
 * Open tails (event streams and `events:` topics): each keeps a database cursor and a wake-up
 * listener. A socket's topic has no API key, so it counts against the account and the process.
 */
export const eventStreams = new HeldResource({
  resource: "event_streams",
  what: "event streams",
  perProcess: { name: "event_streams.per_process", cap: () => config.limits.held.eventStreamsPerProcess },
  callers: [
    { name: "event_streams.per_key", per: "API key", cap: () => config.limits.held.eventStreamsPerKey, refusal: 429 },
    {
      name: "event_streams.per_account",
      per: "account",
      cap: () => config.limits.held.eventStreamsPerAccount,
      refusal: 429,
    },
  ],
  retryAfterSeconds: 5,
  free: "close one",
});
