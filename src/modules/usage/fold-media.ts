/**
 * Streams, recordings and phone calls, rebuilt from every event about their subject (a stream
 * name, a SIP Call-ID) each time one of them is folded.
 */
import { sql } from "drizzle-orm";
import type { Database } from "../../db/client";
import type { StoredEvent } from "../conference-log";
import { type MediaSubject, mediaEventsForSubjects } from "./fold-log";
import { rowsOf } from "../../db/rows";
import type { Touched } from "./fold-days";
import type { CallDetails, MediaKind } from "./schema";

interface MediaInterval {
  accountId: string;
  room: string;
  kind: MediaKind;
  subject: string;
  startedAt: Date;
  endedAt: Date | null;
  peakViewers: number;
  details: CallDetails;
}

/**
 * Pairs the starts and stops of one subject in time order. A stream's recording runs from
 * recording_started, or stream_started with `recording: true`, to recording_stopped or the
 * stream's stop. A call counts from call_started (sent when answered) to call_ended; a call
 * that ended unanswered is kept with no duration, so the report can list it.
 */
function pairMediaEvents(events: StoredEvent[]): MediaInterval[] {
  const intervals: MediaInterval[] = [];
  const open = new Map<MediaInterval["kind"], MediaInterval>();
  const start = (event: StoredEvent, kind: MediaInterval["kind"], details: CallDetails = {}) => {
    if (open.has(kind)) return;
    const interval: MediaInterval = {
      accountId: event.accountId,
      room: event.room,
      kind,
      subject: event.subject!,
      startedAt: event.occurredAt,
      endedAt: null,
      peakViewers: 0,
      details,
    };
    open.set(kind, interval);
    intervals.push(interval);
  };
  const stop = (event: StoredEvent, kind: MediaInterval["kind"]) => {
    const interval = open.get(kind);
    if (!interval) return undefined;
    interval.endedAt = event.occurredAt;
    open.delete(kind);
    return interval;
  };
  // The gateway sends text; anything else is kept as its text, so the report stays its declared type.
  const text = (value: unknown) => (value === undefined || value === null ? null : String(value));
  const callDetails = (payload: Record<string, unknown>): CallDetails => ({
    caller: text(payload.caller),
    callee: text(payload.callee),
    answered: payload.answered === true,
    reason: text(payload.reason),
  });

  for (const event of events) {
    switch (event.kind) {
      case "stream_started":
        start(event, "streaming");
        if (event.payload.recording === true) start(event, "recording");
        break;
      case "stream_stopped": {
        const stream = stop(event, "streaming");
        // The streaming feature also sends the peak it counted itself.
        const peak = Number(event.payload.peak_viewers);
        if (stream && Number.isFinite(peak)) stream.peakViewers = Math.max(stream.peakViewers, Math.round(peak));
        stop(event, "recording");
        break;
      }
      case "recording_started":
        start(event, "recording");
        break;
      case "recording_stopped":
        stop(event, "recording");
        break;
      case "viewers_changed": {
        const viewers = Number(event.payload.viewers);
        const stream = open.get("streaming") ?? intervals.findLast((interval) => interval.kind === "streaming");
        if (stream && Number.isFinite(viewers)) stream.peakViewers = Math.max(stream.peakViewers, Math.round(viewers));
        break;
      }
      case "call_started":
        start(event, "phone", callDetails({ ...event.payload, answered: true }));
        break;
      case "call_ended": {
        const call = stop(event, "phone");
        if (call) call.details = { ...call.details, ...callDetails({ ...event.payload, answered: true }) };
        else {
          start(event, "phone", callDetails(event.payload));
          stop(event, "phone");
        }
        break;
      }
      default:
        break;
    }
  }
  // Two intervals starting in the same second share a key; the later one is what the log says last.
  return [
    ...new Map(intervals.map((interval) => [`${interval.kind}|${interval.startedAt.getTime()}`, interval])).values(),
  ];
}

export async function rebuildMedia(tx: Database, subjects: MediaSubject[]): Promise<Touched[]> {
  if (subjects.length === 0) return [];
  const events = await mediaEventsForSubjects(subjects, tx);
  const bySubject = Map.groupBy(events, (event) => `${event.accountId}|${event.subject}`);
  const intervals = [...bySubject.values()].flatMap(pairMediaEvents);
  const removed = rowsOf<{ account_id: string; room: string; started_at: string; ended_at: string | null }>(
    // Each subject's rows found by a probe of its index (`offset 0` keeps the subquery correlated),
    // then deleted by ctid (a row is never updated, only deleted and written again, so its ctid names
    // it): joined as a table, the list was hashed against a scan of every media session there is,
    // whatever the statistics said, so each fold's cost grew with the table.
    await tx.execute(sql`
    delete from media_sessions m
    where m.ctid = any(array(
      select x.ctid from jsonb_to_recordset(${JSON.stringify(subjects)}::jsonb) as s("accountId" text, subject text)
      cross join lateral (
        select ctid from media_sessions where account_id = s."accountId" and subject = s.subject offset 0
      ) as x))
    returning m.account_id, m.room, m.started_at, m.ended_at`),
  );
  // One statement over a JSON list: the query builder's insert of a page's streams cost more of
  // this process's CPU than PostgreSQL spent writing them.
  if (intervals.length > 0)
    await tx.execute(sql`
      insert into media_sessions (account_id, room, kind, subject, started_at, ended_at, peak_viewers, details)
      select "accountId", room, kind, subject, "startedAt", "endedAt", "peakViewers", details
      from jsonb_to_recordset(${JSON.stringify(intervals)}::jsonb) as i("accountId" text, room text, kind text,
        subject text, "startedAt" timestamptz, "endedAt" timestamptz, "peakViewers" integer, details jsonb)`);
  return [
    ...removed.map((row) => ({
      accountId: row.account_id,
      room: row.room,
      from: new Date(row.started_at),
      to: new Date(row.ended_at ?? row.started_at),
    })),
    ...intervals.map((interval) => ({
      accountId: interval.accountId,
      room: interval.room,
      from: interval.startedAt,
      to: interval.endedAt ?? interval.startedAt,
    })),
  ];
}
