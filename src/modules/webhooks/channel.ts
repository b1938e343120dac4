/**
 * The `events:<account_id>` socket channel: the account's catalogue events, live, as the event
 * log and its stream show them (event = the type, payload = the event's JSON). It reads the
 * log's live tail (stream.ts), woken by the outbox in whichever process the socket is on, so
 * every API process serves its own sockets and nothing crosses the realtime broker. The event
 * log takes the account's API key; on a socket its equal is a token whose scope covers the
 * platform (`parley`, or an empty scope). A join may carry `after`, a sequence number, to
 * resume exactly after the last event it got; without it the topic starts from the join.
 */
import { AppError } from "../../core/errors";
import { log } from "../../core/log";
import type { Channel, Member } from "../../realtime/channel";
import type { Release } from "../limits/held";
import { eventStreams, latestSequence, liveEvents } from "./stream";

export const EVENTS_TOPIC_PREFIX = "events";
/** A join admitted but never completed (the socket closed meanwhile) gives its slot back after this long. */
const UNWELCOMED_MS = 10_000;
/** After a failed read of the log, the topic reads again from its cursor this much later. */
const RETRY_MS = 2_000;

/** The members' tails in this process: stopped when the member leaves or its socket closes. */
const tails = new Map<Member, { stop: AbortController; release: Release }>();

/** The join's `after`: a whole number as the event log's cursor takes it, or none. */
function afterOf(payload: unknown): number | undefined {
  const after = typeof payload === "object" && payload !== null ? (payload as { after?: unknown }).after : undefined;
  if (after === undefined || after === null) return undefined;
  if (typeof after !== "number" || !Number.isSafeInteger(after) || after < 0) {
    throw new AppError(
      "validation_failed",
      `after: must be an event's sequence number, a whole number from 0 to ${Number.MAX_SAFE_INTEGER}`,
    );
  }
  return after;
}

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
    const requested = afterOf(payload);
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
