/**
 * Parley behind a real Jitsi Prosody: Debian's Prosody 0.12 (Lua 5.4) with Jitsi's
 * unmodified mod_reservations (both variants: upstream's util.json one and the cjson fork
 * that sends ids back as `1.0`) and jitsi-contrib's event_sync, read from the folders
 * test/support/prosody.ts names (each variant skipped, saying so, without them) and
 * configured with the lines of docs/jitsi.md, against Parley listening on loopback. Participants open rooms the way
 * jitsi-meet does (conference IQ to the focus, then MUC presence); Jicofo's stand-in joins
 * each room first and leaves after the last participant, so Prosody destroys the room.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { overrideConfig } from "../../src/core/config";
import { roomKey } from "../../src/core/room-key";
import { app, call, newAccount } from "../helpers";
import { foldQueued } from "../support/cdr-worker";
import {
  type JitsiClient,
  type Prosody,
  type ReservationsVariant,
  skipWithout,
  startProsody,
} from "../support/prosody";
import { until } from "../support/wait";

const SCHEDULER = "/api/v1/scheduler";
const VARIANTS: ReservationsVariant[] = ["utiljson", "cjson"];
/** The variants whose plugins are here; each other one is skipped with a line saying what to set. */
const AVAILABLE = VARIANTS.filter(
  (variant) => !skipWithout(`mod_reservations (${variant}) and event_sync`, { reservations: variant, eventSync: true }),
);
/** mod_reservations looks for expired reservations every 60 s from its start (its own constant). */
const EXPIRY_CHECK_MS = 60_000;
/** Opened at once in each Prosody, reserved until before the module's first expiry check. */
const SUNSET = "sunset";

type Account = Awaited<ReturnType<typeof newAccount>>;

let server: ReturnType<typeof Bun.serve>;
/** Every Prosody that came up, for afterAll, even when the rest of its set-up failed. */
const prosodys: Prosody[] = [];
const running = new Map<
  ReservationsVariant,
  { prosody: Prosody; account: Account; startedAt: number; alice: JitsiClient; bob: JitsiClient }
>();

/** `YYYY-MM-DDTHH:MM:SS` in UTC, as a reservation's start_time in timezone UTC. */
const utc = (ms: number) => new Date(ms).toISOString().slice(0, 19);

async function reserve(account: Account, name: string, startMs: number, minutes: number, owner = "owner@example.com") {
  const answer = await call("POST", `${SCHEDULER}/reservation`, {
    headers: { authorization: account.apiKey },
    body: { mail_owner: owner, name, start_time: utc(startMs), duration: minutes, timezone: "UTC" },
  });
  expect(answer.status, JSON.stringify(answer.body)).toBe(200);
  return answer.body as { id: number; name: string; room_key: string };
}

async function conferences(account: Account, room: string) {
  const answer = await call("GET", `${SCHEDULER}/conference`, { headers: { authorization: account.apiKey } });
  return (
    answer.body as Array<{
      id: number;
      name: string;
      ended_at: string | null;
      reservation_id: number | null;
      duration: number;
    }>
  ).filter((conference) => conference.name === room);
}

/** Waits (bounded) until every conference of the room has ended: Prosody's DELETE arrived. */
async function allEnded(account: Account, room: string) {
  const list = await until(
    () => conferences(account, room),
    (found) => found.length > 0 && found.every((conference) => conference.ended_at !== null),
    10_000,
  );
  expect(list.length, `conferences of ${room}`).toBeGreaterThan(0);
  expect(
    list.filter((conference) => conference.ended_at === null),
    `conferences of ${room} still open`,
  ).toEqual([]);
  return list;
}

beforeAll(async () => {
  server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: (request) => app.handle(request) });
  // Both Prosodys run at once, so their reservation-expiry timers run out together. Every
  // start is waited for, failed or not, so afterAll stops each Prosody that came up.
  const started = await Promise.allSettled(
    AVAILABLE.map(async (variant) => {
      const account = await newAccount();
      const startedAt = Date.now();
      const prosody = await startProsody({
        parleyUrl: `http://127.0.0.1:${server.port}`,
        apiKey: account.apiKey,
        reservations: variant,
        eventSync: true,
      });
      prosodys.push(prosody);
      const [alice, bob] = [await prosody.participant(), await prosody.participant()];
      running.set(variant, { prosody, account, startedAt, alice, bob });
      const minutes = (startedAt + EXPIRY_CHECK_MS - 20_000 - (Date.now() - 2_000)) / 60_000;
      await reserve(account, "Sunset", Date.now() - 2_000, minutes);
      const opened = await alice.open(SUNSET);
      if (!opened.ok)
        throw new Error(`${variant}: ${SUNSET} did not open: ${JSON.stringify(opened)}\n${prosody.log().slice(-4000)}`);
    }),
  );
  for (const result of started) if (result.status === "rejected") throw result.reason;
});

afterAll(async () => {
  await Promise.all(prosodys.map((prosody) => prosody.stop()));
  server?.stop(true);
});

for (const variant of VARIANTS) {
  describe.skipIf(!AVAILABLE.includes(variant))(`mod_reservations (${variant}) and event_sync against Parley`, () => {
    let prosody: Prosody;
    let account: Account;
    let startedAt: number;
    let alice: JitsiClient;
    let bob: JitsiClient;

    /** Runs a check and, when it fails, shows Prosody's log of the run. */
    async function withLog(check: () => Promise<void>) {
      try {
        await check();
      } catch (error) {
        console.error(`--- prosody log (${variant}) ---\n${prosody.log().slice(-6000)}`);
        throw error;
      }
    }

    beforeAll(() => {
      ({ prosody, account, startedAt, alice, bob } = running.get(variant)!);
    });

    test("a room with no reservation opens, for the default 24 hours", () =>
      withLog(async () => {
        expect(await alice.open("adhoc")).toEqual({ ok: true });
        expect(await conferences(account, "adhoc")).toMatchObject([
          { duration: 86_400, reservation_id: null, ended_at: null },
        ]);
        await alice.leave("adhoc");
        await allEnded(account, "adhoc");
      }));

    test("a room within its reservation opens, linked to it", () =>
      withLog(async () => {
        const reservation = await reserve(account, "Planning", Date.now() - 60_000, 30);
        expect(await bob.open("planning")).toEqual({ ok: true });
        expect(await conferences(account, "planning")).toMatchObject([
          { reservation_id: reservation.id, ended_at: null },
        ]);
        await bob.leave("planning");
      }));

    test("before its reservation a room is refused with 403, after it with 419", () =>
      withLog(async () => {
        await reserve(account, "Tomorrow", Date.now() + 86_400_000, 30);
        expect(await alice.open("tomorrow")).toMatchObject({
          ok: false,
          stage: "focus",
          code: 403,
          text: expect.stringContaining("not started"),
        });
        await reserve(account, "Yesterday", Date.now() - 86_400_000, 30);
        expect(await alice.open("yesterday")).toMatchObject({
          ok: false,
          stage: "focus",
          code: 419,
          text: expect.stringContaining("ended"),
        });
        expect(await conferences(account, "tomorrow")).toEqual([]);
        expect(await conferences(account, "yesterday")).toEqual([]);
      }));

    test("with SCHEDULER_CHECK_OWNER on, an anonymous user is not the owner (403); off, the room opens", () =>
      withLog(async () => {
        await reserve(account, "Owned", Date.now() - 60_000, 30, "boss@example.com");
        const restore = overrideConfig({ scheduler: { checkOwner: true } });
        try {
          expect(await alice.open("owned")).toMatchObject({
            ok: false,
            stage: "focus",
            code: 403,
            text: expect.stringContaining("owner"),
          });
        } finally {
          restore();
        }
        // The module keeps a refusal for 30 s (and evicts it on its minute timer): a second room shows the default.
        await reserve(account, "Owned Too", Date.now() - 60_000, 30, "boss@example.com");
        expect(await alice.open(roomKey("Owned Too"))).toEqual({ ok: true });
        await alice.leave(roomKey("Owned Too"));
      }));

    test("a room destroyed ends its conference and opens again, time after time", () =>
      withLog(async () => {
        await reserve(account, "Daily", Date.now() - 60_000, 60);
        const seen: number[] = [];
        for (let round = 0; round < 4; round++) {
          expect(await alice.open("daily"), `round ${round}`).toEqual({ ok: true });
          if (round % 2 === 1) expect(await bob.open("daily")).toEqual({ ok: true });
          const [open] = (await conferences(account, "daily")).filter((conference) => conference.ended_at === null);
          expect(open).toBeDefined();
          seen.push(open!.id);
          await alice.leave("daily");
          if (round % 2 === 1) await bob.leave("daily");
          // The focus leaves after the last participant; Prosody destroys the room and sends DELETE.
          await allEnded(account, "daily");
        }
        expect(new Set(seen).size).toBe(4);
      }));

    test("a room Parley still counts as running (another shard opened it) opens through the 409 path", () =>
      withLog(async () => {
        const form = new URLSearchParams({
          name: "shared",
          start_time: `${new Date().toISOString().slice(0, 19)}.000Z`,
          mail_owner: "x@meet.example.com",
        });
        const elsewhere = await call("POST", `${SCHEDULER}/conference`, {
          headers: { authorization: account.apiKey, "content-type": "application/x-www-form-urlencoded" },
          raw: form.toString(),
        });
        expect(elsewhere.status).toBe(200);
        // Prosody gets 409 with conflict_id, asks GET /conference/{id} (1.0 from the cjson variant) and opens the room.
        expect(await bob.open("shared")).toEqual({ ok: true });
        await bob.leave("shared");
        // Destroyed here, the conference it joined ends: DELETE with that id.
        const [ended] = await allEnded(account, "shared");
        expect(ended!.id).toBe(elsewhere.body.id);
        expect(await bob.open("shared")).toEqual({ ok: true });
        await bob.leave("shared");
      }));

    test('a reservation on "Design Review" governs design%20review, the room jitsi-meet opens for it', () =>
      withLog(async () => {
        const later = await reserve(account, "Design Review", Date.now() + 3_600_000, 30);
        expect(later.room_key).toBe("design%20review");
        expect(await alice.open("design%20review")).toMatchObject({ ok: false, stage: "focus", code: 403 });
        const now = await reserve(account, "Café", Date.now() - 60_000, 30);
        expect(now).toMatchObject({ name: "Café", room_key: "caf%c3%a9" });
        expect(await bob.open(roomKey("Café"))).toEqual({ ok: true });
        expect(await conferences(account, "caf%c3%a9")).toMatchObject([{ reservation_id: now.id, ended_at: null }]);
        await bob.leave(roomKey("Café"));
        await allEnded(account, "caf%c3%a9");
      }));

    test("joins and leaves reach the usage report through event_sync, with their minutes", () =>
      withLog(async () => {
        const room = "standup";
        const joinedFrom = Math.floor(Date.now() / 1000);
        expect(await alice.open(room, "alice")).toEqual({ ok: true });
        expect(await bob.open(room, "bob")).toEqual({ ok: true });
        const joinedTo = Math.ceil(Date.now() / 1000);
        await Bun.sleep(2_100);
        await bob.leave(room);
        await Bun.sleep(1_000);
        await alice.leave(room);
        const leftTo = Math.ceil(Date.now() / 1000);
        await allEnded(account, room);
        const basic = `Basic ${Buffer.from(`${account.accountId}:${account.apiKey}`).toString("base64")}`;
        const report = await until(
          async () => {
            await foldQueued();
            const answer = await call("POST", "/api/v1/pricing/cdr", {
              headers: { authorization: basic },
              body: { room_name: ["Standup"] },
            });
            return answer.body;
          },
          (body) =>
            body.rooms?.[0]?.status === "inactive" &&
            body.rooms[0].users.length === 2 &&
            body.rooms[0].users.every((user: any) => user.left_at),
          15_000,
          200,
        );
        expect(report.rooms).toHaveLength(1);
        const [meeting] = report.rooms;
        expect(meeting.room_id).toBe(room);
        // The focus (Jicofo) is not a participant; each stay is counted from its own join to its own leave.
        const seconds = (user: any) => (Date.parse(user.left_at) - Date.parse(user.joined_at)) / 1000;
        for (const user of meeting.users) {
          expect(user.occupant_jid).not.toContain("focus");
          expect(Date.parse(user.joined_at) / 1000).toBeWithin(joinedFrom, joinedTo + 1);
          expect(Date.parse(user.left_at) / 1000).toBeLessThanOrEqual(leftTo);
          expect(user.minutes).toBe(Math.round((seconds(user) / 60) * 100) / 100);
        }
        const [first, second] = meeting.users.map(seconds).sort((x: number, y: number) => x - y);
        // bob stayed about 2 s, alice about 3 s (event_sync counts whole seconds).
        expect(first).toBeWithin(1, 4);
        expect(second).toBeWithin(2, 5);
        expect(second).toBeGreaterThan(first);
        expect(meeting.media_usage.participant_minutes).toBe(Math.round(((first + second) / 60) * 100) / 100);
        expect(meeting.media_usage).toMatchObject({ peak_participants: 2, distinct_participants: 2 });
      }));

    test(
      "the reservation's end terminates the room, and its conference ends",
      () =>
        withLog(async () => {
          const deadline = startedAt + EXPIRY_CHECK_MS + 15_000 - Date.now();
          const destroyed = await until(
            () => alice.destroyed.includes(`${SUNSET}@conference.meet.example.com`),
            Boolean,
            Math.max(deadline, 1_000),
            200,
          );
          expect(destroyed).toBe(true);
          const [conference] = await allEnded(account, SUNSET);
          expect(conference!.ended_at).not.toBeNull();
        }),
      EXPIRY_CHECK_MS + 30_000,
    );
  });
}
