/**
 * The wire contract with Jitsi's Prosody plugins, without the plugins: every HTTP request
 * they sent Parley in the live tests (test/fixtures/jitsi-traffic/, recorded as its README
 * says) is sent again, as recorded, to Parley in-process, in order, for a fresh account, and
 * each answer must have what the plugin reads from it.
 *
 * What the plugins read (from their code; the recordings show the requests):
 * - mod_reservations, on `POST /conference` (form fields `name`, `start_time`,
 *   `mail_owner`) and on `GET /conference/{id}`: a 200 is a JSON object whose `name` is the
 *   room it asked for, ignoring case; whose `id` and `mail_owner` are present; whose
 *   `duration` is a number of seconds (a numeric string would do); and whose `start_time`
 *   is an ISO 8601 date-time Prosody's datetime parser takes (date, `T`, time, optional
 *   fraction, then `Z` or an offset). The room closes at start_time + duration. A 409 must
 *   carry `conflict_id`, which the module then asks for with `GET /conference/{id}`. Any
 *   other status refuses the room: the status becomes the refusal's error code and the
 *   answer's `message` its text. The id goes back in `DELETE /conference/{id}` when the room
 *   is destroyed, as sent (the cjson.safe build sends `1.0`); that answer is only logged.
 * - event_sync posts JSON events and reads no answer body: a status of 500 or more (or none)
 *   makes it post again, anything else is done.
 * - the token modules fetch `asap-keys/<sha256 hex of the kid>.pem` and take the body of a
 *   200 (or 204) as the PEM public key; any other status means no key, and the token is refused.
 *
 * State the recording implies is made again before each request: a recorded 200 that
 * names a reservation gets that reservation (moved to now), a 403 or 419 the reservation
 * that refused it (one not started, one over, or with the owner check on, another owner's),
 * a 409 the conference another Prosody opened. Recorded ids map to the ids of the replay.
 */
import { describe, expect, test } from "bun:test";
import { createHash, createPublicKey } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { overrideConfig } from "../../src/core/config";
import { revokeSigningKey } from "../../src/modules/accounts/service";
import { call, newAccount } from "../helpers";
import type { RecordedExchange, Recording } from "../support/jitsi-traffic";

const DIR = join(import.meta.dir, "../fixtures/jitsi-traffic");
const recordings: Recording[] = readdirSync(DIR)
  .filter((name) => name.endsWith(".json"))
  .sort()
  .map((name) => JSON.parse(readFileSync(join(DIR, name), "utf8")));

/** Prosody's datetime.parse: a date, `T`, a time, an optional fraction, then Z or an offset. */
const PROSODY_DATETIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})$/;
/** Prosody's form encoding of a time, `2026-11-25T18%3a47%3a29.000Z`. */
const FORM_TIME = /(\d{4}-\d{2}-\d{2}T\d{2})%3a(\d{2})%3a(\d{2})\.(\d{3})Z/g;
const SCHEDULER = "/api/v1/scheduler";

type Account = Awaited<ReturnType<typeof newAccount>>;

/** `YYYY-MM-DDTHH:MM:SS` in UTC, as a reservation's start_time in timezone UTC. */
const utc = (ms: number) => new Date(ms).toISOString().slice(0, 19);

async function reserve(account: Account, name: string, startMs: number, minutes: number, owner = "owner@example.com") {
  const answer = await call("POST", `${SCHEDULER}/reservation`, {
    headers: { authorization: account.apiKey },
    body: { mail_owner: owner, name, start_time: utc(startMs), duration: minutes, timezone: "UTC" },
  });
  expect(answer.status, JSON.stringify(answer.body)).toBe(200);
}

async function send(exchange: RecordedExchange, account: Account, path: string, body = exchange.request.body) {
  const headers = Object.fromEntries(
    Object.entries(exchange.request.headers).map(([name, value]) => [
      name,
      value.replaceAll("PARLEY_API_KEY", account.apiKey),
    ]),
  );
  return call(exchange.request.method, path, { headers, raw: exchange.request.method === "GET" ? undefined : body });
}

/** What mod_reservations checks in a conference answer for `room`. */
function expectConference(body: any, room: string) {
  expect(body).toBeObject();
  expect(
    typeof body.name === "string" && body.name.toLowerCase() === room.toLowerCase(),
    `name ${body.name} for ${room}`,
  ).toBe(true);
  expect(body.id).toBeNumber();
  expect(body.mail_owner).toBeString();
  expect(Number.isFinite(Number(body.duration)) && typeof body.duration !== "boolean").toBe(true);
  expect(body.start_time).toMatch(PROSODY_DATETIME);
}

/** A refusal: the status is the error code mod_reservations passes on, `message` its text. */
function expectRefusal(body: any) {
  expect(body.message).toBeString();
  expect(body.message.length).toBeGreaterThan(0);
}

/** Replays one recording's scheduler and event_sync traffic for a fresh account. */
async function replayScheduler(recording: Recording) {
  const account = await newAccount();
  const started = Date.parse(recording.startedAt);
  const ids = new Map<string, number>();
  /** The recorded reservations made again so far: a reservation governs every opening of its room. */
  const reservations = new Set<number>();
  const seen = { conference: 0, get: 0, delete: 0, refused: 0, conflict: 0, events: 0, pointZero: 0 };
  for (const exchange of recording.exchanges) {
    const { request, response } = exchange;
    const what = `${request.method} ${request.path} (${response.status} at ${exchange.at} ms)`;
    // The recorded instant of this request is now: times in bodies move by the same amount.
    const shift = Date.now() - (started + exchange.at);
    const moved = (iso: string) => new Date(Date.parse(iso) + shift).toISOString();

    if (request.path.startsWith("/api/v1/events/")) {
      const answer = await send(exchange, account, request.path);
      expect(answer.status, what).toBeLessThan(500);
      expect(answer.status, what).toBe(response.status);
      // A repeat is told apart from a first delivery as in the recording: the bodies are the same.
      expect(answer.body, what).toEqual(response.json as object);
      seen.events++;
      continue;
    }

    if (request.method === "POST" && request.path === `${SCHEDULER}/conference`) {
      const room = request.form!.name!;
      const recorded = response.json as any;
      let restore = () => {};
      if (response.status === 200 && recorded.reservation_id !== null) {
        if (!reservations.has(recorded.reservation_id)) {
          reservations.add(recorded.reservation_id);
          await reserve(
            account,
            room,
            Date.parse(moved(recorded.start_time)),
            recorded.duration / 60,
            request.form!.mail_owner,
          );
        }
      } else if (response.status === 403 && /owner/.test(recorded.message)) {
        await reserve(account, room, Date.now() - 60_000, 30, "boss@example.com");
        restore = overrideConfig({ scheduler: { checkOwner: true } });
      } else if (response.status === 403) await reserve(account, room, Date.now() + 3_600_000, 30);
      else if (response.status === 419) await reserve(account, room, Date.now() - 86_400_000, 30);
      else if (response.status === 409) {
        const form = new URLSearchParams({
          name: room,
          start_time: `${utc(Date.now())}.000Z`,
          mail_owner: "x@meet.example.com",
        });
        const elsewhere = await call("POST", `${SCHEDULER}/conference`, {
          headers: { authorization: account.apiKey, "content-type": "application/x-www-form-urlencoded" },
          raw: form.toString(),
        });
        expect(elsewhere.status).toBe(200);
      }
      const body = request.body.replace(FORM_TIME, (_, hour, minute, second, ms) => {
        const time = moved(`${hour}:${minute}:${second}.${ms}Z`);
        return `${time.slice(0, 13)}%3a${time.slice(14, 16)}%3a${time.slice(17, 19)}.${time.slice(20, 23)}Z`;
      });
      const answer = await send(exchange, account, request.path, body).finally(restore);
      expect(answer.status, `${what}: ${JSON.stringify(answer.body)}`).toBe(response.status);
      if (answer.status === 200) {
        expectConference(answer.body, room);
        ids.set(String(recorded.id), answer.body.id);
        seen.conference++;
      } else if (answer.status === 409) {
        expect(answer.body.conflict_id, what).toBeNumber();
        ids.set(String(recorded.conflict_id), answer.body.conflict_id);
        seen.conflict++;
      } else {
        expectRefusal(answer.body);
        seen.refused++;
      }
      continue;
    }

    const byId = new RegExp(`^${SCHEDULER}/conference/(\\d+)(\\.0)?$`).exec(request.path);
    if (byId && (request.method === "GET" || request.method === "DELETE")) {
      const [, recordedId, pointZero] = byId;
      const id = ids.get(recordedId!);
      expect(id, `${what}: the recording's id ${recordedId} came before`).toBeDefined();
      if (pointZero) seen.pointZero++;
      const answer = await send(exchange, account, `${SCHEDULER}/conference/${id}${pointZero ?? ""}`);
      expect(answer.status, what).toBe(response.status);
      if (request.method === "GET") {
        expectConference(answer.body, (response.json as any).name);
        seen.get++;
      } else seen.delete++;
      continue;
    }
    throw new Error(`the recording holds a request the replay does not know: ${what}`);
  }
  return seen;
}

const scheduler = recordings.filter((recording) => recording.plugins.startsWith("reservations-"));
const tokens = recordings.filter((recording) => recording.plugins === "token-auth");

describe("Jitsi's Prosody plugins' recorded requests, replayed against Parley", () => {
  test("the recordings are here: both mod_reservations builds with event_sync, and token auth", () => {
    expect(recordings.map((recording) => recording.plugins)).toEqual([
      "reservations-cjson+event_sync",
      "reservations-utiljson+event_sync",
      "token-auth",
    ]);
  });

  for (const recording of scheduler) {
    test(`${recording.plugins}: every answer has what the module reads`, async () => {
      const seen = await replayScheduler(recording);
      // The paths that matter were in the recording, and the replay went through them.
      expect(seen.conference).toBeGreaterThan(5);
      expect(seen.refused).toBeGreaterThanOrEqual(3);
      expect(seen.conflict).toBeGreaterThanOrEqual(1);
      expect(seen.get).toBeGreaterThanOrEqual(1);
      expect(seen.delete).toBeGreaterThan(5);
      expect(seen.events).toBeGreaterThan(20);
      // The cjson.safe build sends every id back as `N.0`, the util.json one as `N`.
      expect(seen.pointZero).toBe(recording.plugins.includes("cjson") ? seen.get + seen.delete : 0);
    });
  }

  test("room names arrive as jitsi-meet encodes them, and are answered so", () => {
    const names = scheduler.flatMap((recording) =>
      recording.exchanges.map((exchange) => exchange.request.form?.name).filter(Boolean),
    );
    expect(names).toContain("design%20review");
    expect(names).toContain("caf%c3%a9");
  });

  for (const recording of tokens) {
    test("token auth: a key fetch gets the key as PEM, or for a revoked key no key", async () => {
      const account = await newAccount("RS256");
      const revoked = await newAccount("RS256");
      await revokeSigningKey(revoked.kid);
      const sha = (kid: string) => createHash("sha256").update(kid).digest("hex");
      let served = 0;
      for (const exchange of recording.exchanges) {
        const { request, response } = exchange;
        const key = /^\/api\/v1\/jitsi\/asap-keys\/([0-9a-f]{64})\.pem$/.exec(request.path);
        expect(key, request.path).not.toBeNull();
        expect(request.headers.authorization).toBeUndefined();
        const kid = response.status === 200 ? account.kid : revoked.kid;
        const answer = await send(exchange, account, `/api/v1/jitsi/asap-keys/${sha(kid)}.pem`);
        expect(answer.status).toBe(response.status);
        if (response.status === 200) {
          expect(answer.body).toStartWith("-----BEGIN PUBLIC KEY-----");
          expect(createPublicKey(answer.body).asymmetricKeyType).toBe("rsa");
          served++;
        }
      }
      expect(served).toBeGreaterThan(0);
      expect(recording.exchanges.length).toBeGreaterThan(served);
    });
  }
});
