/**
 * The features write the catalogue's events with their state changes: event_sync rooms and
 * participants (once per fact, however often Prosody retries), reservations and conferences,
 * streams and recordings, phone calls and settled usage days. A change that fails writes no event.
 */
import { describe, expect, setSystemTime, test } from "bun:test";
import { randomUUID } from "node:crypto";
import { endConference, openConference } from "../../src/modules/scheduler/conferences";
import { finishStream, markRunning } from "../../src/modules/streaming/transitions";
import { sweepUnfolded } from "../../src/modules/usage/fold";
import { CallLog } from "../../sip-gateway/call-log";
import { call, newAccount } from "../helpers";
import { at, deliver, occupantJoined, occupantLeft, roomCreated, roomDestroyed } from "../support/event-sync";
import { insertStartingStream } from "../support/streams";

const auth = (apiKey: string) => ({ authorization: `Bearer ${apiKey}` });

async function eventsOf(apiKey: string, types?: string) {
  const answer = await call("GET", `/api/v1/events?limit=1000${types ? `&types=${types}` : ""}`, {
    headers: auth(apiKey),
  });
  expect(answer.status).toBe(200);
  return answer.body.events as any[];
}

describe("event_sync", () => {
  test("rooms and participants: catalogue events once each; room.ended follows the fold, with minutes", async () => {
    const a = await newAccount();
    const t0 = 1_900_000_000;
    const occupant = { occupant_jid: "room@conference.example/alice", joined_at: t0 + 10, name: "Alice", id: "u1" };
    const deliveries = [
      ["/api/v1/events/room/created", { event_name: "muc-room-created", room_name: "Standup", created_at: t0 }],
      ["/api/v1/events/occupant/joined", { event_name: "muc-occupant-joined", room_name: "Standup", occupant }],
      [
        "/api/v1/events/occupant/left",
        { event_name: "muc-occupant-left", room_name: "Standup", occupant: { ...occupant, left_at: t0 + 130 } },
      ],
      [
        "/api/v1/events/room/destroyed",
        {
          event_name: "muc-room-destroyed",
          room_name: "Standup",
          created_at: t0,
          destroyed_at: t0 + 301,
          all_occupants: [
            { ...occupant, left_at: t0 + 130 },
            { occupant_jid: "room@conference.example/bob", joined_at: t0 + 20 },
          ],
        },
      ],
    ] as const;
    for (const [path, body] of deliveries) {
      expect((await call("POST", path, { headers: auth(a.apiKey), body })).status).toBe(200);
      // Prosody retries a delivery it thinks failed: still one event.
      expect((await call("POST", path, { headers: auth(a.apiKey), body })).body).toEqual({ stored: false });
    }
    // room.ended carries the report's figures, so it is written by the fold of the destroy.
    expect((await eventsOf(a.apiKey)).map((event) => event.type)).toEqual([
      "room.started",
      "participant.joined",
      "participant.left",
    ]);
    await sweepUnfolded(0);
    // Folding the same events again ends no room again.
    const { refoldLog } = await import("../../src/modules/usage/fold");
    await refoldLog({ accountId: a.accountId });
    const got = await eventsOf(a.apiKey, "room.started,participant.joined,participant.left,room.ended");
    expect(got.map((event) => [event.sequence, event.type])).toEqual([
      [1, "room.started"],
      [2, "participant.joined"],
      [3, "participant.left"],
      [4, "room.ended"],
    ]);
    expect(got[0].data).toEqual({ room: "standup", breakout_id: "", started_at: new Date(t0 * 1000).toISOString() });
    expect(got[1].data.participant).toEqual({
      occupant_jid: occupant.occupant_jid,
      id: "u1",
      name: "Alice",
      email: null,
    });
    expect(got[2].data).toMatchObject({ left_at: new Date((t0 + 130) * 1000).toISOString(), minutes: 2 });
    // 301 s → 6 minutes; Alice 120 s + Bob (no leave: until the end) 281 s = 401 s → 7 minutes.
    expect(got[3].data).toMatchObject({
      duration_seconds: 301,
      minutes: 6,
      participant_minutes: 7,
      participants: 2,
      meeting_id: `standup@${t0}`,
    });
    expect(got[3].data.usage).toEqual({
      participant_minutes: 6.68,
      phone_minutes: 0,
      streaming_minutes: 0,
      recording_minutes: 0,
      peak_participants: 2,
      distinct_participants: 2,
      peak_viewers: 0,
    });
  });

  test("a room whose destroy lists nobody ends with the figures the report gives it", async () => {
    const a = await newAccount();
    const created = at("10:00:00");
    const ann = { name: "Ann", id: "ann", occupant_jid: "9f@meet.example.com/Ann1" };
    const ben = { name: "Ben", id: "ben", occupant_jid: "7c@meet.example.com/Ben1" };
    for (const delivery of [
      roomCreated("retro", created),
      occupantJoined("retro", ann, at("10:00:05"), 1),
      occupantJoined("retro", ben, at("10:01:00"), 2),
      occupantLeft("retro", ann, at("10:00:05"), at("10:05:00"), 1),
      occupantLeft("retro", ben, at("10:01:00"), at("10:06:00"), 0),
      // Prosody lists only who is still in the room when it is destroyed: nobody.
      roomDestroyed("retro", created, at("10:06:30"), []),
    ]) {
      expect((await deliver(a.apiKey, delivery)).status).toBe(200);
    }
    // The report folds what is pending first: no worker has run, and it already counts every stay.
    const report = (
      await call("POST", "/api/v1/pricing/cdr", {
        headers: auth(a.apiKey),
        body: { start_date: "2026-11-20T00:00:00Z", end_date: "2026-11-21T00:00:00Z" },
      })
    ).body;
    expect(report.rooms).toHaveLength(1);
    const usage = report.rooms[0].media_usage;
    // Ann 295 s, Ben 300 s: 9.92 minutes.
    expect(usage.participant_minutes).toBe(9.92);
    const [ended] = await eventsOf(a.apiKey, "room.ended");
    expect(ended.data).toEqual({
      room: "retro",
      breakout_id: "",
      started_at: "2026-11-20T10:00:00.000Z",
      ended_at: "2026-11-20T10:06:30.000Z",
      duration_seconds: 390,
      minutes: 7,
      participant_minutes: 10,
      participants: 2,
      meeting_id: report.rooms[0].room_details.MeetingId,
      usage: {
        participant_minutes: usage.participant_minutes,
        phone_minutes: usage.phone_minutes,
        streaming_minutes: usage.streaming_minutes,
        recording_minutes: usage.recording_minutes,
        peak_participants: usage.peak_participants,
        distinct_participants: usage.distinct_participants,
        peak_viewers: usage.peak_viewers,
      },
    });
  });
});

describe("scheduler", () => {
  test("reservations and conferences", async () => {
    const a = await newAccount();
    const created = await call("POST", "/api/v1/scheduler/reservation", {
      headers: auth(a.apiKey),
      body: {
        name: "Board Room",
        mail_owner: "owner@example.com",
        start_time: "2031-01-15T10:00:00",
        duration: 60,
        timezone: "UTC",
      },
    });
    expect(created.status).toBe(200);
    // A refused reservation (overlap) writes nothing.
    const clash = await call("POST", "/api/v1/scheduler/reservation", {
      headers: auth(a.apiKey),
      body: {
        name: "Board Room",
        mail_owner: "owner@example.com",
        start_time: "2031-01-15T10:30:00",
        duration: 60,
        timezone: "UTC",
      },
    });
    expect(clash.status).toBe(409);
    expect(
      (await call("DELETE", `/api/v1/scheduler/reservation/${created.body.id}`, { headers: auth(a.apiKey) })).status,
    ).toBe(200);
    const conference = await openConference(a.accountId, {
      name: "huddle",
      start_time: "2031-02-01T09:00:00.000Z",
      mail_owner: "bob@example.com",
    });
    await endConference(a.accountId, String(conference.id), new Date("2031-02-01T09:30:00.000Z"));
    // Ending it again changes nothing and says nothing.
    await endConference(a.accountId, String(conference.id), new Date("2031-02-01T09:40:00.000Z"));

    const got = await eventsOf(a.apiKey);
    expect(got.map((event) => event.type)).toEqual([
      "reservation.created",
      "reservation.deleted",
      "conference.started",
      "conference.ended",
    ]);
    // Events name a room by its room key, as jitsi-meet names "Board Room".
    expect(got[0].data).toEqual({
      reservation_id: created.body.id,
      room: "board%20room",
      mail_owner: "owner@example.com",
      start_time: "2031-01-15T10:00:00",
      duration: 60,
      timezone: "UTC",
    });
    expect(got[1].data).toEqual({ reservation_id: created.body.id, room: "board%20room" });
    expect(got[2].data).toMatchObject({
      conference_id: conference.id,
      room: "huddle",
      mail_owner: "bob@example.com",
      reservation_id: null,
    });
    expect(got[3].data).toEqual({ conference_id: conference.id, room: "huddle", ended_at: "2031-02-01T09:30:00.000Z" });
  });
});

describe("streaming", () => {
  test("started, failed with its reason, stopped, and recording.ready with the object key and vod_url", async () => {
    const a = await newAccount();
    const failing = await insertStartingStream(a.accountId, "broken");
    await finishStream(failing.id, ["starting"], "failed", "recorder_failed");
    // A second finisher (reconciliation racing the recorder) writes nothing.
    await finishStream(failing.id, ["starting", "running"], "failed", "recorder_failed");
    const vod = await insertStartingStream(a.accountId, "talk", { is_recording: true, is_vod: true });
    expect(await markRunning(vod.id)).toBe(true);
    expect(await markRunning(vod.id)).toBe(false);
    await finishStream(vod.id, ["running"], "stopped", "requested", "accounts/x/recordings/talk-abcd.mp4");

    const got = await eventsOf(a.apiKey);
    expect(got.map((event) => event.type)).toEqual([
      "stream.failed",
      "stream.started",
      "stream.stopped",
      "recording.ready",
    ]);
    expect(got[0].data).toEqual({
      stream_id: failing.id,
      stream_name: "broken-abcd",
      room: "broken",
      reason: "recorder_failed",
    });
    expect(got[1].data).toEqual({ stream_id: vod.id, stream_name: "talk-abcd", room: "talk", recording: true });
    expect(got[2].data).toMatchObject({ reason: "requested" });
    expect(got[3].data).toMatchObject({ object_key: "accounts/x/recordings/talk-abcd.mp4" });
    expect(got[3].data.vod_url).toEndWith("/talk-abcd.mp4");
  });
});

describe("SIP calls and usage", () => {
  test("call.started at the answer, call.ended with its duration, then usage.day_settled from the fold", async () => {
    const a = await newAccount();
    const log = new CallLog({
      callId: `call-${randomUUID()}@example`,
      caller: "sip:+15550100@example",
      callee: "sip:123@parley",
      transport: "udp",
      source: "127.0.0.1",
    });
    await log.resolved({ accountId: a.accountId, room: "phones", resolvedBy: "header" } as never);
    await log.answered();
    // The call lasts 1.1 s by the clock, which is moved on rather than waited for.
    setSystemTime(new Date(Date.now() + 1_100));
    try {
      await log.ended("bye");
    } finally {
      setSystemTime();
    }

    const calls = await eventsOf(a.apiKey, "call.started,call.ended");
    expect(calls.map((event) => event.type)).toEqual(["call.started", "call.ended"]);
    expect(calls[0].data).toMatchObject({ room: "phones", caller: "sip:+15550100@example", callee: "sip:123@parley" });
    expect(calls[1].data).toMatchObject({ answered: true, reason: "bye" });
    expect(calls[1].data.duration_seconds).toBeGreaterThanOrEqual(1);

    await sweepUnfolded(0);
    const days = await eventsOf(a.apiKey, "usage.day_settled");
    expect(days.length).toBe(1);
    expect(days[0].data).toMatchObject({ room: "phones", day: new Date().toISOString().slice(0, 10) });
    expect(days[0].data.phone_seconds).toBeGreaterThanOrEqual(1);
    // Folding the same events again computes the same figures and announces nothing.
    const { refoldLog } = await import("../../src/modules/usage/fold");
    await refoldLog();
    expect((await eventsOf(a.apiKey, "usage.day_settled")).length).toBe(1);
  });
});
