/**
 * What the console's pages show, assembled from the services the public API uses: the
 * usage report for rooms, stays and calls, the streaming service for streams and viewers.
 * Nothing here reads another feature's tables.
 */
import { listAccounts } from "../accounts";
import {
  LIVE_STATES,
  queuedStreams,
  queuePlaces,
  recentStreams,
  type Stream,
  streamUrls,
  viewersOf,
} from "../streaming";
import { type UsageReport, usageReport } from "../usage";

const HOUR_MS = 3_600_000;
/** The overview's charts: the last 24 hours, one point every 10 minutes. */
const SERIES_STEP_MS = 10 * 60_000;
const SERIES_SPAN_MS = 24 * HOUR_MS;
/**
 * The report lists meetings that started in its window; a week back catches the rooms that
 * are open now and began before the last 24 hours.
 */
const OPEN_ROOM_LOOKBACK_MS = 7 * 24 * HOUR_MS;
const RECENT_STREAMS = 50;

export interface StreamView {
  id: string;
  account_id: string;
  room: string;
  stream_name: string;
  state: Stream["state"];
  /** While queued, its place in the queue of every account's starts, 1 first; otherwise null. */
  position: number | null;
  /** The start's priority, 0 to 9. */
  priority: number;
  reason: string | null;
  created_at: string;
  started_at: string | null;
  stopped_at: string | null;
  viewers: number;
  peak_viewers: number;
  hls_url: string;
  /** Where the finished recording plays, once it is uploaded; empty before or without VOD. */
  vod_url: string;
}

export interface Failure {
  at: string;
  account_id: string;
  kind: "stream" | "call";
  room: string;
  subject: string;
  reason: string;
}

export interface Overview {
  now: {
    rooms_open: number;
    participants: number;
    streams: Record<"starting" | "running" | "stopping", number>;
    sip_calls: number;
    viewers: number;
  };
  /** Unix seconds, and the figure at each of them. */
  series: { times: number[]; participants: number[]; streams: number[]; calls: number[] };
  failures: Failure[];
}

async function accountsInView(accountId: string | undefined): Promise<string[]> {
  return accountId ? [accountId] : (await listAccounts()).map((account) => account.id);
}

export async function streamsView(accountId: string | undefined): Promise<StreamView[]> {
  const [recent, places] = await Promise.all([recentStreams(accountId, RECENT_STREAMS), queuePlaces()]);
  // Every queued stream is shown, with its place, even one older than the recent ones.
  const shown = new Set(recent.map((stream) => stream.id));
  const older = (await queuedStreams())
    .filter((stream) => !shown.has(stream.id) && (accountId === undefined || stream.accountId === accountId))
    .reverse();
  return Promise.all(
    [...recent, ...older].map(async (stream) => {
      const viewers = await viewersOf(stream);
      const urls = streamUrls(stream);
      return {
        id: stream.id,
        account_id: stream.accountId,
        room: stream.room,
        stream_name: stream.streamName,
        state: stream.state,
        position: places.get(stream.id) ?? null,
        priority: stream.priority,
        reason: stream.reason,
        created_at: stream.createdAt.toISOString(),
        started_at: stream.startedAt?.toISOString() ?? null,
        stopped_at: stream.stoppedAt?.toISOString() ?? null,
        viewers: viewers.current,
        peak_viewers: viewers.peak,
        hls_url: urls.hls_url,
        vod_url: stream.recordingKey ? urls.vod_url : "",
      };
    }),
  );
}

const during = (start: string, end: string | null, at: number) =>
  Date.parse(start) <= at && (end === null || Date.parse(end) > at);

export async function overview(accountId: string | undefined, now = new Date()): Promise<Overview> {
  const accounts = await accountsInView(accountId);
  const window = {
    startDate: new Date(now.getTime() - OPEN_ROOM_LOOKBACK_MS).toISOString(),
    endDate: now.toISOString(),
  };
  const reports: UsageReport[] = await Promise.all(accounts.map((id) => usageReport(id, window, now)));
  const rooms = reports.flatMap((report) => report.rooms);
  const stays = rooms.flatMap((room) => room.users);
  const calls = rooms.flatMap((room) =>
    room.media_usage.calls.map((call) => ({ ...call, room: room.room_id, account: room.room_details.OwnerId })),
  );
  const mediaStreams = rooms.flatMap((room) =>
    room.media_usage.streams.filter((stream) => stream.kind === "streaming"),
  );
  const streams = await streamsView(accountId);

  const first = Math.floor((now.getTime() - SERIES_SPAN_MS) / SERIES_STEP_MS) * SERIES_STEP_MS + SERIES_STEP_MS;
  const series: Overview["series"] = { times: [], participants: [], streams: [], calls: [] };
  for (let at = first; at <= now.getTime(); at += SERIES_STEP_MS) {
    series.times.push(at / 1000);
    series.participants.push(stays.filter((stay) => during(stay.joined_at, stay.left_at, at)).length);
    series.streams.push(mediaStreams.filter((stream) => during(stream.started_at, stream.ended_at, at)).length);
    series.calls.push(calls.filter((call) => call.answered && during(call.started_at, call.ended_at, at)).length);
  }

  const since = now.getTime() - SERIES_SPAN_MS;
  const failures: Failure[] = [
    ...streams
      .filter((stream) => stream.state === "failed" && Date.parse(stream.stopped_at ?? stream.created_at) >= since)
      .map((stream) => ({
        at: stream.stopped_at ?? stream.created_at,
        account_id: stream.account_id,
        kind: "stream" as const,
        room: stream.room,
        subject: stream.stream_name,
        reason: stream.reason ?? "failed",
      })),
    ...calls
      .filter((call) => !call.answered && Date.parse(call.started_at) >= since)
      .map((call) => ({
        at: call.started_at,
        account_id: call.account,
        kind: "call" as const,
        room: call.room,
        subject: call.call_id,
        reason: call.reason ?? "not answered",
      })),
  ].sort((a, b) => b.at.localeCompare(a.at));

  const live = streams.filter((stream) => LIVE_STATES.includes(stream.state));
  const count = (state: Stream["state"]) => live.filter((stream) => stream.state === state).length;
  return {
    now: {
      rooms_open: rooms.filter((room) => room.status === "active").length,
      participants: stays.filter((stay) => stay.left_at === null).length,
      streams: { starting: count("starting"), running: count("running"), stopping: count("stopping") },
      sip_calls: calls.filter((call) => call.answered && call.ended_at === null).length,
      viewers: live.reduce((sum, stream) => sum + stream.viewers, 0),
    },
    series,
    failures: failures.slice(0, 20),
  };
}
