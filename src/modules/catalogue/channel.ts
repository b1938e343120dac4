/**
 * The `events:<account_id>` socket channel: the account's catalogue events, live, as the event
 * log and its stream show them (event = the type, payload = the event's JSON). It reads the
 * log's live tail (stream.ts), woken by the outbox in whichever process the socket is on, so
 * every API process serves its own sockets and nothing crosses the realtime broker. The event
 * log takes the account's API key; on a socket its equal is a token whose scope covers the
 * platform (`parley`, or an empty scope). A join may carry `after`, a sequence number, to
 * resume exactly after the last event it got; without it the topic starts from the join.
 */
import { t } from "elysia";
import { AppError } from "../../core/errors";
import { log } from "../../core/log";
import { REASON } from "../../http/text";
import type { Channel, Member } from "../../realtime";
import type { Release } from "../limits";
import { latestSequence, liveEvents } from "./stream";
import { eventStreams } from "./tail-cap";

export const EVENTS_TOPIC_PREFIX = "events";
/** A join admitted but never completed (the socket closed meanwhile) gives its slot back after this long. */
const UNWELCOMED_MS = 10_000;
/** After a failed read of the log, the topic reads again from its cursor this much later. */
const RETRY_MS = 2_000;

/** The members' tails in this process: stopped when the member leaves or its socket closes. */
const tails = new Map<Member, { stop: AbortController; release: Release }>();

/** An account's topic: its id, as the account's own token names it. */
const AccountTopic = t.String({ minLength: 1, maxLength: 64, [REASON]: "the account's id (acc_…)" });

/** A join may carry `after`, the sequence number of the last event it got, to resume just after it. */
const EventsJoin = t.Object({
  after: t.Optional(
    t.Integer({
      minimum: 0,
      maximum: Number.MAX_SAFE_INTEGER,
      [REASON]: `must be an event's sequence number, a whole number from 0 to ${Number.MAX_SAFE_INTEGER}`,
    }),
  ),
});

/** Waits `ms`, or less when `signal` aborts. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

/** Pushes the account's events after `after` to the member until `stop` aborts; a failed read is tried again. */
async function tail(member: Member, after: number, stop: AbortSignal): Promise<void> {
  while (!stop.aborted) {
    try {
      for await (const events of liveEvents(member.actor.accountId, { after }, stop)) {
        for (const event of events) {
          member.push(event.type, event);
          after = event.sequence;
        }
      }
    } catch (error) {
      log.warn({ err: (error as Error).message }, "realtime: the events topic could not read the event log; retrying");
      await pause(RETRY_MS, stop);
    }
  }
}

export const eventsChannel: Channel = {
  prefix: EVENTS_TOPIC_PREFIX,
  // Read-only: no event a client may push.
  models: { name: { field: "topic", model: AccountTopic }, events: {}, join: EventsJoin },
  async join(actor, accountId, payload) {
    if (!actor.platform) {
      throw new AppError(
        "forbidden",
        "the token's scope does not cover the platform: events topics need a token of scope parley (or empty)",
      );
    }
    if (accountId !== actor.accountId) {
      throw new AppError("forbidden", `a socket hears only its own account's events, on events:${actor.accountId}`);
    }
    const requested = (payload as typeof EventsJoin.static).after;
    let release = eventStreams.take([undefined, actor.accountId]);
    let after: number;
    try {
      after = requested ?? (await latestSequence(actor.accountId));
    } catch (error) {
      release();
      throw error;
    }
    let unwelcomed: ReturnType<typeof setTimeout> | undefined = setTimeout(() => {
      unwelcomed = undefined;
      release();
    }, UNWELCOMED_MS);
    unwelcomed.unref?.();
    return async (member) => {
      if (unwelcomed) clearTimeout(unwelcomed);
      // Completed so late that its slot went back: it takes one again, or is refused like a new join.
      else release = eventStreams.take([undefined, actor.accountId]);
      const stop = new AbortController();
      tails.set(member, { stop, release });
      void tail(member, after, stop.signal);
    };
  },
  // Never reached: the socket refuses every push, since the models name no event.
  async push(_member, event) {
    throw new AppError("bad_request", `events topics are read-only: "${event}" is not taken here`);
  },
  async leave(member) {
    const held = tails.get(member);
    if (!held) return;
    tails.delete(member);
    held.stop.abort();
    held.release();
  },
};
