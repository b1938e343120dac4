/**
 * Calls of a gateway process that died mid-call (killed, or its machine lost). Such a call
 * never gets its end written, and an open call counts phone minutes until now, for ever.
 * Every gateway beats in Redis; every gateway, now and then, ends the open calls of gateways
 * whose beat stopped, at their last beat, so the bill stops within seconds of the death.
 */
import { hostname } from "node:os";
import { and, eq, isNull } from "drizzle-orm";
import { config } from "../src/core/config";
import { db } from "../src/db/client";
import { log } from "../src/core/log";
import { appendEvent } from "../src/modules/conference-log";
import { recordEvents } from "../src/modules/catalogue";
import { redis, redisKey, withinRedis } from "../src/queue/connection";
import { type CallRecord, sipCalls } from "./schema";

/** This process's name in call records and in Redis. */
export const GATEWAY_NAME = `${hostname()}-sip-${process.pid}`;

/**
 * A gateway silent for SIP_GATEWAY_LOST_MS is gone. It beats three times in that span, so a beat
 * lost to a slow Redis does not make it look gone, and every gateway looks a little more often
 * than that span, so a lost gateway's calls are ended within about twice it.
 */
export function lostTimers({ lostAfterMs }: { lostAfterMs: number } = config.sip) {
  return {
    silentAfterMs: lostAfterMs,
    heartbeatMs: Math.round(lostAfterMs / 3),
    reconcileEveryMs: Math.round((lostAfterMs * 5) / 6),
  };
}

/** Beyond the longest call, an open call whose gateway is unknown is over whatever happened. */
const UNKNOWN_GATEWAY_MARGIN_MS = 60_000;

/** gateway name -> its last beat (ms since the epoch). */
const beatsKey = () => redisKey("sip", "gateways");

/**
 * Writes the end of a call its gateway never wrote: the usage event first, as CallLog does,
 * with its call.ended catalogue event (and so its webhooks) in the same transaction.
 */
export async function endLostCall(call: CallRecord, at: Date, reason = "gateway_lost"): Promise<void> {
  const { accountId, room } = call;
  if (accountId && room) {
    const answered = call.answeredAt !== null;
    const ended = {
      call_id: call.callId,
      room,
      caller: call.caller || null,
      callee: call.callee || null,
      ended_at: at.toISOString(),
      answered,
      duration_seconds: call.answeredAt
        ? Math.max(0, Math.round((at.getTime() - call.answeredAt.getTime()) / 1000))
        : 0,
      reason,
    };
    await appendEvent(
      {
        accountId,
        kind: "call_ended",
        room,
        occurredAt: at,
        subject: call.callId,
        payload: { caller: call.caller, callee: call.callee, answered, reason },
        // The key the gateway itself would have used: if it did write the
        // end, this one is dropped, and no second call.ended is told.
        dedupeKey: `call:${call.callId}:ended`,
      },
      (tx) => recordEvents(tx, accountId, "call.ended", [ended]),
    );
  }
  await db
    .update(sipCalls)
    .set({ endedAt: at, reason })
    .where(and(eq(sipCalls.id, call.id), isNull(sipCalls.endedAt)));
  log.warn(
    { callId: call.callId, gateway: call.gateway, endedAt: at.toISOString(), reason },
    "sip: ended a call whose end its gateway never wrote",
  );
}

/** Every open call: the lost gateways' and this gateway's own, read by one statement for both checks. */
export function openCalls(): Promise<CallRecord[]> {
  return db.select().from(sipCalls).where(isNull(sipCalls.endedAt));
}

/** `open`: the open calls of other gateways (or of none), as `openCalls` read them. */
async function endCallsOfLostGateways(now: number, open: CallRecord[]): Promise<void> {
  if (open.length === 0) return;
  const beats = await redis().hgetall(beatsKey());
  const longestCallMs = config.sip.maxCallSeconds * 1000;
  const { silentAfterMs } = lostTimers();
  const ending = (call: CallRecord, at: Date) =>
    // One call whose end cannot be written is left for the next look; the calls after it are still ended
    // (in a fixed order they would otherwise wait behind it for ever, billed until the report is read).
    endLostCall(call, at).catch((error: Error) =>
      log.error({ callId: call.callId, err: error.message }, "sip: the end of a lost call could not be written"),
    );
  for (const call of open) {
    const lastBeat = call.gateway ? Number(beats[call.gateway]) : Number.NaN;
    if (Number.isFinite(lastBeat)) {
      if (now - lastBeat >= silentAfterMs) await ending(call, new Date(Math.max(lastBeat, call.startedAt.getTime())));
    } else if (now - call.startedAt.getTime() > longestCallMs + UNKNOWN_GATEWAY_MARGIN_MS) {
      // No beat known (written before gateways beat, or Redis lost its data): the gateway would have hung up by now.
      await ending(call, new Date(call.startedAt.getTime() + longestCallMs));
    }
  }
}

/** Forgets beats of gateways that are long gone and have no open call left. */
async function forgetQuietGateways(now: number): Promise<void> {
  const beats = await redis().hgetall(beatsKey());
  const stale = Object.entries(beats).filter(([, beat]) => now - Number(beat) > 10 * lostTimers().silentAfterMs);
  for (const [name] of stale) {
    const [open] = await db
      .select({ id: sipCalls.id })
      .from(sipCalls)
      .where(and(eq(sipCalls.gateway, name), isNull(sipCalls.endedAt)))
      .limit(1);
    if (!open) await redis().hdel(beatsKey(), name);
  }
}

/**
 * Beats, and every reconcileEveryMs ends the calls of lost gateways. `ownOpen`, when given, is handed
 * this gateway's own open calls at the same moment: its check for calls it forgot shares the timer and
 * the statement that reads the open calls, rather than reading them again on a timer of its own.
 */
export function startLostCallReconciler(ownOpen?: (calls: CallRecord[]) => Promise<unknown>): {
  stop(): Promise<void>;
} {
  const { silentAfterMs, heartbeatMs, reconcileEveryMs } = lostTimers();
  // Since when this gateway's beats have gone through without a break. Right after Redis was
  // unreachable, other gateways have not beaten again yet and would look silent: wait a while.
  let beatingSince: number | undefined;
  const beat = async () => {
    try {
      // Bounded: a beat waiting on a Redis that is gone would hold the stop's last beat, and so the
      // gateway's SIGTERM, until the supervisor killed it.
      await withinRedis(redis(), "sip heartbeat", () => redis().hset(beatsKey(), GATEWAY_NAME, String(Date.now())));
      beatingSince ??= Date.now();
    } catch (error) {
      beatingSince = undefined;
      log.warn({ err: (error as Error).message }, "sip: heartbeat failed");
    }
  };
  const reconcile = async () => {
    const judging = beatingSince !== undefined && Date.now() - beatingSince >= silentAfterMs;
    if (!judging && !ownOpen) return;
    const open = await openCalls();
    if (ownOpen) {
      await ownOpen(open.filter((call) => call.gateway === GATEWAY_NAME)).catch((error: Error) =>
        log.error({ err: error.message }, "sip: forgotten-call check failed"),
      );
    }
    if (!judging) return;
    await endCallsOfLostGateways(
      Date.now(),
      open.filter((call) => call.gateway !== GATEWAY_NAME),
    );
    await forgetQuietGateways(Date.now());
  };
  void beat();
  const heartbeat = setInterval(() => void beat(), heartbeatMs);
  // One look at a time: a look that outlasts the interval (a slow database) is not joined by the next.
  let looking: Promise<void> | undefined;
  const reconciler = setInterval(() => {
    looking ??= reconcile()
      .catch((error: Error) => log.error({ err: error.message }, "sip: lost-call check failed"))
      .finally(() => {
        looking = undefined;
      });
  }, reconcileEveryMs);
  heartbeat.unref?.();
  reconciler.unref?.();
  return {
    async stop() {
      clearInterval(heartbeat);
      clearInterval(reconciler);
      await looking;
      // A last beat: a call whose end this stop failed to write is ended at this moment by another gateway.
      await beat();
    },
  };
}
