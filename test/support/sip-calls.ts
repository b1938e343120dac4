/**
 * What the SIP gateway tests check calls with: a sipp run that must have succeeded, a call's
 * record once it is closed, its usage events, and sipp media endpoints (UAS) for the gateway to bridge to.
 */
import { eq } from "drizzle-orm";
import { db } from "../../src/db/client";
import { conferenceEvents } from "../../src/modules/conference-log/schema";
import type { CallRecord } from "../../sip-gateway/schema";
import { callsById } from "../../sip-gateway/call-log";
import { freePort, udpBound } from "./ports";
import { runSipp, type SippRun } from "./sipp";
import { until } from "./wait";

/** Waits (bounded) until the call's record is closed: records are written behind the signalling. */
export async function endedCall(callId: string): Promise<CallRecord> {
  for (let i = 0; i < 100; i++) {
    const [record] = await callsById(callId);
    if (record?.endedAt) return record;
    await Bun.sleep(50);
  }
  throw new Error(`call ${callId} was never recorded as ended`);
}

/** The usage events a call wrote (call_started, call_ended), in the order they happened. */
export async function usageEvents(callId: string) {
  return db
    .select()
    .from(conferenceEvents)
    .where(eq(conferenceEvents.subject, callId))
    .orderBy(conferenceEvents.occurredAt);
}

/** Fails with what sipp said unless it exited 0; `who` names the sipp in a test that runs several. */
export function expectSuccess(run: SippRun, who?: string): void {
  if (run.code !== 0)
    throw new Error(`${who ? `${who} ` : ""}sipp exited ${run.code}\n${run.errors || run.output.slice(-3000)}`);
}

const endpoints: Promise<unknown>[] = [];

/** A sipp media endpoint (UAS) on a fresh port, echoing RTP; `done` resolves when its one call is over. */
export async function mediaEndpoint(scenario: string, holdMs = 200) {
  const port = await freePort();
  const done = runSipp({
    scenario,
    port: 9,
    listenPort: port,
    holdMs,
    timeoutSeconds: 20,
    extra: ["-rtp_echo", "-trace_msg"],
  });
  // A failed test may leave its endpoint waiting: its file waits
  // for it (sipp's own timeout bounds it) and its temp dir.
  endpoints.push(done);
  // The gateway dials it once its SIP socket is bound (within a few ms); if sipp died instead,
  // `done` says why.
  await until(() => udpBound(port), Boolean, 10_000, 10);
  return { uri: `sip:jigasi@127.0.0.1:${port}`, done };
}

/** Resolves once every media endpoint started so far has ended, however. */
export async function mediaEndpointsEnded(): Promise<void> {
  await Promise.allSettled(endpoints);
}
