/**
 * The end-to-end flows against Parley started as a user starts it (`bun src/index.ts`, every
 * role), twice: on the embedded database (what `npm start` uses with no DATABASE_URL) and on
 * PostgreSQL. Tokens checked against the JWKS, a reservation and Prosody's conference check,
 * chat over the unmodified phoenix client, a stream start and stop (the command recorder), a
 * SIP call from sipp, event_sync deliveries, and the usage report that folds them all. Every
 * wait is bounded and a hang fails naming what was awaited, with Parley's last output. On
 * PostgreSQL every HTTP request and answer goes through Prism's validating proxy and fails on
 * anything the served OpenAPI description does not declare (the socket and the JWKS fetch go
 * straight to Parley; test/docs.test.ts sends the pages' examples on the embedded database through it).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { renameSync } from "node:fs";
import { createRemoteJWKSet, jwtVerify } from "jose";
import { Socket } from "phoenix";
import { CLOSE_SERVICE_RESTART } from "../../src/realtime/protocol";
import { type Person, roomFields } from "../support/event-sync";
import { http, type Parley, recordersOf, startParley, within } from "../support/parley";
import { connect, disconnect, join, push, recorder } from "../support/phoenix";
import { runSipp } from "../support/sipp";
import { startValidatingProxy } from "../support/validating-proxy";

const GRACE_MS = 20_000;
// Says it publishes, then runs until stopped, as a real recorder would.
const RECORDER = "echo ready; exec sleep 120";
const ROOM = "e2eroom";
const CONFERENCE = `${ROOM}@conference.meet.example.com`;

const alice: Person = { name: "Alice", id: "alice", occupant_jid: "a1@meet.example.com/Aa1" };
const bob: Person = { name: "Bob", id: "bob", occupant_jid: "b1@meet.example.com/Bb1" };

/** yyyy-MM-ddTHH:mm of an instant, in UTC: a reservation's start_time with timezone UTC. */
const utcMinute = (ms: number) => new Date(ms).toISOString().slice(0, 16);
// As docs/usage.md defines them: whole seconds, then minutes with two decimals.
const minutesBetween = (from: string, to: string) =>
  Math.round((Math.round((Date.parse(to) - Date.parse(from)) / 1000) / 60) * 100) / 100;

const MODES = [
  { name: "the embedded database (PGlite, no DATABASE_URL)", embedded: true, validated: false },
  { name: "PostgreSQL (DATABASE_URL), through the validating proxy", embedded: false, validated: true },
];

for (const mode of MODES) {
  describe(`end to end on ${mode.name}`, () => {
    let parley: Parley;
    let apiKey: string;
    /** Unix seconds when the meeting of this run opened: half an hour before the run. */
    const opened = Math.floor(Date.now() / 1000) - 1800;
    let streamName: string;
    let callId: string;

    const deliver = async (path: string, body: Record<string, unknown>) => {
      const answer = await http(parley, "POST", `/api/v1/events${path}`, { body, auth: `Bearer ${apiKey}` });
      expect(answer.status, `${path} ${JSON.stringify(answer.body)}`).toBe(200);
    };

    beforeAll(async () => {
      parley = await startParley({
        embedded: mode.embedded,
        env: {
          // On PGlite the first start makes the first account; on PostgreSQL the admin CLI does.
          BOOTSTRAP_ACCOUNT: String(mode.embedded),
          SHUTDOWN_GRACE_MS: String(GRACE_MS),
          STREAMING_RECORDER_DRIVER: "command",
          STREAMING_RECORDER_COMMAND: RECORDER,
          // The owner check is off by default (anonymous Jitsi logins); this flow checks it on.
          SCHEDULER_CHECK_OWNER: "true",
        },
      });
      // Requests are validated too: the flows send only what the description should accept.
      if (mode.validated) parley.via = await startValidatingProxy(parley.base, { validateRequests: true });
      if (mode.embedded) {
        apiKey = await within(parley, "data/first-api-key", 20_000, async () => {
          const file = Bun.file(`${parley.dataDir}/first-api-key`);
          return (await file.exists()) ? (await file.text()).trim() : undefined;
        });
      } else {
        const made = await parley.admin("create-account", "e2e");
        expect(made.code, made.stderr).toBe(0);
        apiKey = /api key\s+(\S+)/.exec(made.stdout)![1]!;
      }
    }, 90_000);

    afterAll(() => parley?.cleanup());

    test("the command line beside the running server goes through its socket; without it PGlite refuses", async () => {
      // On PGlite too, whose folder admits one process: the command is the running Parley's to do.
      const listed = await parley.admin("list-accounts");
      expect(listed.code, listed.stderr).toBe(0);
      expect(listed.stderr).toBe("");
      expect(listed.stdout).toMatch(/^acc_\w+ {2}/);
      if (!mode.embedded) expect(listed.stdout).toContain("e2e");
      if (mode.embedded) {
        // Its socket out of reach (moved aside): the command line falls back to direct mode, which the
        // database the running Parley holds refuses, naming the holder and what to do instead.
        const socket = `${parley.dataDir}/parley.sock`;
        renameSync(socket, `${socket}.aside`);
        try {
          const refused = await parley.admin("list-accounts");
          expect(refused.code).toBe(1);
          expect(refused.stdout).toBe("");
          expect(refused.stderr).toContain(
            `embedded database in ${parley.dataDir} is open in process ${parley.process.pid}`,
          );
          expect(refused.stderr).toContain("stop that one first, or let it take the command");
        } finally {
          renameSync(`${socket}.aside`, socket);
        }
      }
      expect((await http(parley, "GET", "/readyz")).status).toBe(200);
    }, 40_000);

    test("a token is issued and verifies against the JWKS", async () => {
      const issued = await http(parley, "POST", "/api/v1/misc/generate-token", {
        body: { apiKey, user: { id: "alice", name: "Alice" }, scope: "messaging" },
      });
      expect(issued.status, JSON.stringify(issued.body)).toBe(200);
      const jwks = createRemoteJWKSet(new URL(`${parley.base}/.well-known/jwks.json`), { timeoutDuration: 10_000 });
      const { payload } = await jwtVerify(issued.body.token, jwks, { issuer: "parley", audience: "messaging" });
      expect(payload.context).toMatchObject({ user: { id: "alice", name: "Alice" } });
      const forged = `${issued.body.token.slice(0, -4)}${issued.body.token.slice(-4) === "AAAA" ? "BBBB" : "AAAA"}`;
      await expect(jwtVerify(forged, jwks, { issuer: "parley" })).rejects.toThrow();
    });

    test("a reservation, then Prosody's conference check lets its owner in and no one else", async () => {
      const reserved = await http(parley, "POST", "/api/v1/scheduler/reservation", {
        auth: apiKey,
        body: {
          name: "e2eplan",
          mail_owner: "owner@example.com",
          start_time: utcMinute(Date.now() - 5 * 60_000),
          duration: 60,
          timezone: "UTC",
        },
      });
      expect(reserved.status, JSON.stringify(reserved.body)).toBe(200);
      const now = new Date().toISOString();
      const stranger = await http(parley, "POST", "/api/v1/scheduler/conference", {
        auth: apiKey,
        form: { name: "e2eplan", start_time: now, mail_owner: "someone@example.com" },
      });
      expect(stranger.status).toBe(403);
      const owner = await http(parley, "POST", "/api/v1/scheduler/conference", {
        auth: apiKey,
        form: { name: "e2eplan", start_time: now, mail_owner: "owner@example.com" },
      });
      expect(owner.status, JSON.stringify(owner.body)).toBe(200);
      expect(owner.body).toMatchObject({
        reservation_id: reserved.body.id,
        name: "e2eplan",
        mail_owner: "owner@example.com",
      });
    });

    test("chat over the phoenix client: join, send, receive, history", async () => {
      const token = async (id: string) =>
        (
          await http(parley, "POST", "/api/v1/misc/generate-token", {
            body: { apiKey, user: { id, name: id }, scope: "messaging" },
          })
        ).body.token as string;
      const [aliceToken, bobToken] = await Promise.all([token("alice"), token("bob")]);
      const created = await http(parley, "POST", "/api/v1/messaging/rooms/create", {
        auth: `Bearer ${aliceToken}`,
        body: { channel_id: "e2echat" },
      });
      expect(created.status, JSON.stringify(created.body)).toBe(201);

      const aliceSocket = connect(parley.ws, aliceToken);
      const bobSocket = connect(parley.ws, bobToken);
      try {
        const aliceChannel = aliceSocket.channel("chat:e2echat");
        const bobChannel = bobSocket.channel("chat:e2echat");
        const bobSees = recorder(bobChannel, ["new_message"]);
        await join(aliceChannel);
        await join(bobChannel);
        const sent = await push(aliceChannel, "new_message", { content: "hello Bob" });
        expect(sent.status, JSON.stringify(sent.response)).toBe("ok");
        expect(await bobSees.next("new_message", (message) => message.content === "hello Bob")).toMatchObject({
          id: sent.response.message.id,
          created_by: "alice",
        });
        // A poll is stored in one transaction (message and options), then voted on.
        const poll = await push(aliceChannel, "new_message", {
          content: "Lunch?",
          content_type: "poll",
          options: ["Pizza", "Soup"],
        });
        expect(poll.status, JSON.stringify(poll.response)).toBe("ok");
        const soup = poll.response.message.options.find((option: any) => option.text === "Soup");
        const voted = await push(bobChannel, "new_vote", { message_id: poll.response.message.id, answer: soup.id });
        expect(voted).toEqual({ status: "ok", response: { poll_answer: { answer: soup.id, user_id: "bob" } } });

        const later = connect(parley.ws, bobToken);
        try {
          const channel = later.channel("chat:e2echat");
          const history = recorder(channel, ["archived_message"]);
          await join(channel);
          expect(
            await history.next("archived_message", (message) => message.id === sent.response.message.id),
          ).toMatchObject({ content: "hello Bob" });
        } finally {
          await disconnect(later);
        }
        const listed = await http(parley, "GET", "/api/v1/messaging/rooms/e2echat/messages", {
          auth: `Bearer ${bobToken}`,
        });
        expect(listed.status).toBe(200);
        expect(JSON.stringify(listed.body)).toContain("hello Bob");
      } finally {
        await Promise.all([disconnect(aliceSocket), disconnect(bobSocket)]);
      }
    });

    test("event_sync: the meeting opens and two people come and go", async () => {
      await deliver("/room/created", { event_name: "muc-room-created", ...roomFields(ROOM), created_at: opened });
      await deliver("/occupant/joined", {
        event_name: "muc-occupant-joined",
        ...roomFields(ROOM),
        active_occupants_count: 1,
        occupant: { ...alice, joined_at: opened + 60 },
      });
      await deliver("/occupant/joined", {
        event_name: "muc-occupant-joined",
        ...roomFields(ROOM),
        active_occupants_count: 2,
        occupant: { ...bob, joined_at: opened + 120 },
      });
      // Bob: 10 minutes; Alice: 20 minutes.
      await deliver("/occupant/left", {
        event_name: "muc-occupant-left",
        ...roomFields(ROOM),
        active_occupants_count: 1,
        occupant: { ...bob, joined_at: opened + 120, left_at: opened + 720 },
      });
      await deliver("/occupant/left", {
        event_name: "muc-occupant-left",
        ...roomFields(ROOM),
        active_occupants_count: 0,
        occupant: { ...alice, joined_at: opened + 60, left_at: opened + 1260 },
      });
      // Read at once, the cdr role folding at the same time: the report counts every acknowledged event.
      const acknowledged = Date.now();
      const answer = await http(parley, "POST", "/api/v1/pricing/cdr", {
        auth: `Bearer ${apiKey}`,
        body: { room_name: [ROOM], start_date: new Date((opened - 60) * 1000).toISOString() },
      });
      expect(answer.status, JSON.stringify(answer.body)).toBe(200);
      expect(Date.parse(answer.body.as_of)).toBeGreaterThanOrEqual(acknowledged);
      const meeting = answer.body.rooms.find((entry: any) => entry.room_type === "conference");
      expect(meeting.status).toBe("active");
      expect(meeting.users.map((user: any) => [user.user_id, user.minutes, user.left_at !== null])).toEqual([
        ["alice", 20, true],
        ["bob", 10, true],
      ]);
      expect(answer.body.totals).toMatchObject({ participant_minutes: 30, open_stays: 0 });
    });

    test("a stream starts on the recorder and stops", async () => {
      const started = await http(parley, "POST", "/terraform/v1/hooks/srs/startRecording", {
        auth: `Bearer ${apiKey}`,
        body: { room_name: CONFERENCE },
      });
      expect(started.status, JSON.stringify(started.body)).toBe(200);
      expect(started.body.started).toBe(true);
      streamName = started.body.stream_name;
      const viewers = await http(parley, "GET", `/terraform/v1/hooks/srs/live/viewers/count/${streamName}`);
      expect(viewers.status).toBe(200);
      // Live for a whole second before the stop, so the report below has minutes of it to count.
      await within(parley, "the stream to be live for a second", 10_000, async () => {
        const count = await http(parley, "GET", `/terraform/v1/hooks/srs/live/viewers/count/${streamName}`);
        return count.body[streamName]?.uptime >= 1 ? true : undefined;
      });
      const stopped = await http(parley, "POST", "/terraform/v1/hooks/srs/stopRecording", {
        auth: `Bearer ${apiKey}`,
        body: { room_name: ROOM },
      });
      expect(stopped.status, JSON.stringify(stopped.body)).toBe(200);
      expect(stopped.body).toMatchObject({ started: false, stream_name: streamName });
    }, 40_000);

    test("a SIP call from sipp joins the room through its dial-in id", async () => {
      const mapped = await http(parley, "GET", `/api/v1/conference-mapper/conferenceMapper?conference=${CONFERENCE}`, {
        auth: apiKey,
      });
      expect(mapped.status, JSON.stringify(mapped.body)).toBe(200);
      const run = await runSipp({
        scenario: "call.xml",
        port: parley.sipPort,
        service: "gateway",
        keys: { extra_header: `Parley-Conference-Room: ${mapped.body.id}` },
        holdMs: 1_500,
      });
      if (run.code !== 0)
        throw new Error(
          `sipp exited ${run.code}\n${run.errors || run.output.slice(-2000)}\n--- Parley said:\n${parley.tail()}`,
        );
      callId = run.callId;
    }, 40_000);

    test("the usage report has the meeting's minutes, the stream and the call", async () => {
      expect(streamName).toBeString();
      expect(callId).toBeString();
      const closed = Math.ceil(Date.now() / 1000) + 1;
      await deliver("/room/destroyed", {
        event_name: "muc-room-destroyed",
        ...roomFields(ROOM),
        created_at: opened,
        destroyed_at: closed,
        all_occupants: [
          { ...alice, joined_at: opened + 60, left_at: opened + 1260 },
          { ...bob, joined_at: opened + 120, left_at: opened + 720 },
        ],
      });
      const range = {
        room_name: [ROOM],
        start_date: new Date((opened - 60) * 1000).toISOString(),
        end_date: new Date((closed + 60) * 1000).toISOString(),
      };
      // The cdr role folds behind the acknowledgements: wait (bounded) for all of it to show.
      const room = await within(parley, "the report to show the meeting, the stream and the call", 30_000, async () => {
        const answer = await http(parley, "POST", "/api/v1/pricing/cdr", { auth: `Bearer ${apiKey}`, body: range });
        if (answer.status !== 200) throw new Error(`report answered ${answer.status}: ${JSON.stringify(answer.body)}`);
        const found = answer.body.rooms.find(
          (entry: any) => entry.room_id === ROOM && entry.room_type === "conference",
        );
        const usage = found?.media_usage;
        const complete =
          found?.status === "inactive" &&
          found.users.length === 2 &&
          usage?.streams?.length > 0 &&
          usage?.calls?.some((c: any) => c.ended_at);
        return complete ? found : undefined;
      });
      expect(room.inferred).toBe(false);
      expect(room.EndedAt).toBe(new Date(closed * 1000).toISOString());
      expect(room.users.map((user: any) => [user.user_id, user.minutes, user.left_estimated])).toEqual([
        ["alice", 20, false],
        ["bob", 10, false],
      ]);
      const usage = room.media_usage;
      expect(usage).toMatchObject({ participant_minutes: 30, peak_participants: 2, distinct_participants: 2 });

      const stream = usage.streams.find((entry: any) => entry.stream_name === streamName && entry.kind === "streaming");
      expect(stream, JSON.stringify(usage.streams)).toBeDefined();
      expect(stream.minutes).toBe(minutesBetween(stream.started_at, stream.ended_at));
      expect(stream.minutes).toBeGreaterThan(0);
      expect(usage.streaming_minutes).toBe(stream.minutes);

      const phoneCall = usage.calls.find((entry: any) => entry.call_id === callId);
      expect(phoneCall, JSON.stringify(usage.calls)).toMatchObject({ answered: true });
      expect(phoneCall.minutes).toBe(minutesBetween(phoneCall.started_at, phoneCall.ended_at));
      expect(phoneCall.minutes).toBeGreaterThan(0);
      expect(usage.phone_minutes).toBe(phoneCall.minutes);

      // room.ended is written by the fold of the destroy, with the report's figures for the meeting.
      const events = await http(parley, "GET", "/api/v1/events?after=0&types=room.ended&limit=1000", {
        auth: `Bearer ${apiKey}`,
      });
      const ended = events.body.events.find((event: any) => event.data.meeting_id === room.room_details.MeetingId);
      expect(ended?.data.usage, JSON.stringify(events.body)).toMatchObject({
        participant_minutes: usage.participant_minutes,
        peak_participants: usage.peak_participants,
        distinct_participants: usage.distinct_participants,
      });
    }, 45_000);

    test("SIGTERM mid-stream: the client told to reconnect, the stream stopped, exit well before grace", async () => {
      const token = (
        await http(parley, "POST", "/api/v1/misc/generate-token", {
          body: { apiKey, user: { id: "carol" }, scope: "messaging" },
        })
      ).body.token;
      const closes: number[] = [];
      const socket = new Socket(`${parley.ws}/api/v1/messaging`, {
        params: { token },
        reconnectAfterMs: () => 60_000,
        timeout: 5_000,
      });
      socket.onClose((event: CloseEvent) => {
        closes.push(event.code);
      });
      socket.connect();
      try {
        await join(socket.channel("chat:e2echat"));
        const stream = await http(parley, "POST", "/terraform/v1/hooks/srs/startRecording", {
          auth: `Bearer ${apiKey}`,
          body: { room_name: "e2eend" },
        });
        expect(stream.status, JSON.stringify(stream.body)).toBe(200);
        expect(recordersOf(stream.body.stream_name)).toHaveLength(1);
        const signalled = Date.now();
        const code = await parley.stop("SIGTERM", GRACE_MS / 2);
        expect(code, parley.tail()).toBe(0);
        expect(Date.now() - signalled).toBeLessThan(GRACE_MS / 4);
        expect(closes[0]).toBe(CLOSE_SERVICE_RESTART);
        // The running stream was stopped with the process, its recorder not left behind.
        expect(recordersOf(stream.body.stream_name)).toEqual([]);
      } finally {
        socket.disconnect();
      }
    }, 30_000);
  });
}
