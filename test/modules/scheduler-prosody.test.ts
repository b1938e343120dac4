/**
 * Parley as the reservation server of a stock Jitsi deployment: Prosody's mod_reservations
 * with `reservations_api_prefix` at /api/v1/scheduler and the API key in
 * `reservations_api_headers`. Requests are written byte for byte as Prosody's net.http
 * sends them, over a real socket, and answers are read the way the module reads them.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { connect } from "node:net";
import { overrideConfig } from "../../src/core/config";
import { app, call, newAccount } from "../helpers";

type Account = Awaited<ReturnType<typeof newAccount>>;

let server: ReturnType<typeof Bun.serve>;

beforeAll(() => {
  server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: (request) => app.handle(request) });
});

afterAll(() => server.stop(true));

/** util.http.urlencode: everything but letters, digits and `.~_-` as %xx with lower-case hex. */
function prosodyUrlencode(value: string): string {
  return Array.from(new TextEncoder().encode(value), (byte) => {
    const char = String.fromCharCode(byte);
    return /[A-Za-z0-9.~_-]/.test(char) ? char : `%${byte.toString(16).padStart(2, "0")}`;
  }).join("");
}

/** mod_reservations' start_time: the current whole second in UTC, then `.000Z`. */
function javaDate(seconds: number): string {
  return `${new Date(seconds * 1000).toISOString().slice(0, 19)}.000Z`;
}

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** One HTTP/1.1 exchange on a fresh connection, read by Content-Length or chunks. */
function exchange(request: string): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const socket = connect(server.port!, "127.0.0.1");
    let received = Buffer.alloc(0);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error("no complete answer within 5 s"));
    }, 5_000);
    const finish = (answer: RawAnswer) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(answer);
    };
    socket.on("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    socket.on("data", (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      const end = received.indexOf("\r\n\r\n");
      if (end < 0) return;
      const [statusLine, ...lines] = received.subarray(0, end).toString("latin1").split("\r\n");
      const headers = Object.fromEntries(
        lines.map((line) => [line.slice(0, line.indexOf(":")).toLowerCase(), line.slice(line.indexOf(":") + 1).trim()]),
      );
      const status = Number(statusLine!.split(" ")[1]);
      const rest = received.subarray(end + 4);
      if (headers["content-length"] !== undefined) {
        const length = Number(headers["content-length"]);
        if (rest.length >= length) finish({ status, headers, body: rest.subarray(0, length).toString("utf8") });
      } else if (headers["transfer-encoding"] === "chunked") {
        let offset = 0;
        const parts: Buffer[] = [];
        while (true) {
          const lineEnd = rest.indexOf("\r\n", offset);
          if (lineEnd < 0) return;
          const size = Number.parseInt(rest.subarray(offset, lineEnd).toString("latin1"), 16);
          if (size === 0) return finish({ status, headers, body: Buffer.concat(parts).toString("utf8") });
          if (rest.length < lineEnd + 2 + size + 2) return;
          parts.push(rest.subarray(lineEnd + 2, lineEnd + 2 + size));
          offset = lineEnd + 2 + size + 2;
        }
      }
    });
    socket.write(request);
  });
}

const PREFIX = "/api/v1/scheduler";
const USER_AGENT = "Prosody (0.12.4; posix)";

/**
 * Prosody's net.http request: Host, its User-Agent (mod_reservations' own), `Connection: close`
 * (the default client keeps no pool), the configured headers, and for a body Content-Length
 * and the form content type.
 */
function prosodyRequest(account: Account, method: string, path: string, form?: Record<string, string>) {
  const body = form
    ? Object.entries(form)
        .map(([key, value]) => `${prosodyUrlencode(key)}=${prosodyUrlencode(value)}`)
        .join("&")
    : "";
  const lines = [
    `${method} ${PREFIX}${path} HTTP/1.1`,
    `Host: 127.0.0.1:${server.port}`,
    `User-Agent: ${USER_AGENT}`,
    "Connection: close",
    `Authorization: ${account.apiKey}`,
  ];
  if (form) lines.push(`Content-Length: ${Buffer.byteLength(body)}`, "Content-Type: application/x-www-form-urlencoded");
  return exchange(`${lines.join("\r\n")}\r\n\r\n${body}`);
}

/** mod_reservations' first call when a room is first joined. */
function createConference(account: Account, room: string, at: number, ownerJid: string) {
  return prosodyRequest(account, "POST", "/conference", { name: room, start_time: javaDate(at), mail_owner: ownerJid });
}

/** util.datetime.parse, in seconds (milliseconds are dropped, as Prosody drops them). */
function prosodyParseDate(text: unknown): number | undefined {
  if (typeof text !== "string") return undefined;
  const match = /^(\d\d\d\d)-?(\d\d)-?(\d\d)T(\d\d):(\d\d):(\d\d)\.?\d*([Z+-]?)(\d?\d?):?(\d?\d?)$/.exec(text);
  if (!match) return undefined;
  const [, year, month, day, hour, minute, second, sign, offsetHours, offsetMinutes] = match;
  let seconds =
    Date.UTC(Number(year), Number(month) - 1, Number(day), Number(hour), Number(minute), Number(second)) / 1000;
  if (sign === "+" || sign === "-") {
    const offset = (Number(offsetHours || 0) * 60 + Number(offsetMinutes || 0)) * 60;
    seconds += sign === "+" ? -offset : offset;
  }
  return seconds;
}

/** What mod_reservations requires of a 200 to let the room start. */
function prosodyAccepts(answer: RawAnswer, room: string) {
  expect(answer.headers["content-type"]).toContain("application/json");
  const data = JSON.parse(answer.body);
  expect(typeof data.name === "string" && data.name.toLowerCase() === room.toLowerCase()).toBe(true);
  expect(data.id).not.toBeNil();
  expect(data.mail_owner).not.toBeNil();
  const duration = Number(data.duration);
  expect(Number.isFinite(duration)).toBe(true);
  const start = prosodyParseDate(data.start_time);
  expect(start).toBeNumber();
  return { data, conflictId: data.id, expiresAt: start! + duration };
}

/** parse_error_message_from_response: the reason Prosody shows comes from `message`. */
function prosodyErrorText(answer: RawAnswer): string {
  const data = JSON.parse(answer.body);
  return typeof data.message === "string" ? data.message : "Rejected by reservation server";
}

/** 2030-01-15T15:00:00Z, in Unix seconds. */
const T0 = Date.UTC(2030, 0, 15, 15, 0, 0) / 1000;
const MINUTE = 60;

describe("Prosody mod_reservations against /api/v1/scheduler", () => {
  let account: Account;
  let reservationId: number;

  beforeAll(async () => {
    account = await newAccount();
    // 10:00 in New York in January is 15:00 UTC.
    const reserved = await call("POST", `${PREFIX}/reservation`, {
      headers: { authorization: account.apiKey },
      body: {
        mail_owner: "alice@meet.example.com",
        name: "Design Review",
        duration: 60,
        start_time: "2030-01-15T10:00",
        timezone: "America/New_York",
      },
    });
    expect(reserved.status).toBe(200);
    reservationId = reserved.body.id;
  });

  test("a reservation that has not started yet is 403 with a message", async () => {
    const answer = await createConference(account, "design%20review", T0 - 10 * MINUTE, "alice@meet.example.com");
    expect(answer.status).toBe(403);
    expect(prosodyErrorText(answer)).toContain("has not started");
  });

  test("with SCHEDULER_CHECK_OWNER on, someone other than the owner is 403 with a message", async () => {
    const restore = overrideConfig({ scheduler: { checkOwner: true } });
    try {
      const answer = await createConference(account, "design%20review", T0 + 5 * MINUTE, "mallory@meet.example.com");
      expect(answer.status).toBe(403);
      expect(prosodyErrorText(answer)).toContain("owner");
      // A Prosody account named by its e-mail address has it XEP-0106-escaped in the JID node.
      const other = await newAccount();
      for (const name of ["escaped-owner", "escaped-other"]) {
        const reserved = await call("POST", `${PREFIX}/reservation`, {
          headers: { authorization: other.apiKey },
          body: {
            mail_owner: "Alice@example.com",
            name,
            duration: 60,
            start_time: "2030-01-15T15:00",
            timezone: "UTC",
          },
        });
        expect(reserved.status).toBe(200);
      }
      expect((await createConference(other, "escaped-owner", T0, "alice\\40example.com@meet.example.com")).status).toBe(
        200,
      );
      expect(
        (await createConference(other, "escaped-other", T0, "mallory\\40example.com@meet.example.com")).status,
      ).toBe(403);
    } finally {
      restore();
    }
  });

  test("the owner within the window starts the room; the conference takes the reservation's time", async () => {
    const opened = await createConference(account, "design%20review", T0 + 10 * MINUTE, "alice@meet.example.com");
    expect(opened.status).toBe(200);
    const { data, expiresAt } = prosodyAccepts(opened, "design%20review");
    expect(data).toEqual({
      id: expect.any(Number),
      name: "design%20review",
      mail_owner: "alice@meet.example.com",
      start_time: "2030-01-15T15:00:00.000Z",
      duration: 3600,
      timezone: "UTC",
      reservation_id: reservationId,
      ended_at: null,
    });
    // Prosody closes the room when the reservation ends.
    expect(expiresAt).toBe(T0 + 60 * MINUTE);

    // Another shard asks for the same room: 409 with conflict_id, then GET /conference/{id}.
    const again = await createConference(account, "design%20review", T0 + 12 * MINUTE, "bob@meet.example.com");
    expect(again.status).toBe(409);
    const { conflict_id } = JSON.parse(again.body);
    expect(conflict_id).toBe(data.id);
    const fetched = await prosodyRequest(account, "GET", `/conference/${conflict_id}`);
    expect(fetched.status).toBe(200);
    expect(prosodyAccepts(fetched, "design%20review").data).toEqual(data);

    // These conferences are what GET /conference lists.
    const listed = await call("GET", `${PREFIX}/conference`, { headers: { authorization: account.apiKey } });
    expect(listed.body).toEqual([data]);
    const byRoom = await call("GET", `${PREFIX}/conference/room/Design%20Review`, {
      headers: { authorization: account.apiKey },
    });
    expect(byRoom.body).toEqual(data);

    // The room is destroyed: Prosody sends DELETE /conference/{conflict_id} (the id it kept).
    const deleted = await prosodyRequest(account, "DELETE", `/conference/${data.id}`);
    expect(deleted.status).toBe(200);
    const ended = JSON.parse(deleted.body);
    expect(ended.id).toBe(data.id);
    expect(ended.ended_at).toBeString();
    // A repeated DELETE (Prosody retries on 5xx only, but a proxy may repeat) changes nothing.
    const repeated = await prosodyRequest(account, "DELETE", `/conference/${data.id}`);
    expect(repeated.status).toBe(200);
    expect(JSON.parse(repeated.body).ended_at).toBe(ended.ended_at);

    // Re-created within the window, the room starts again, linked to the same reservation.
    const reopened = await createConference(account, "design%20review", T0 + 30 * MINUTE, "alice@meet.example.com");
    expect(reopened.status).toBe(200);
    const second = prosodyAccepts(reopened, "design%20review");
    expect(second.data.id).not.toBe(data.id);
    expect(second.data.reservation_id).toBe(reservationId);
    expect(second.expiresAt).toBe(T0 + 60 * MINUTE);
  });

  test("after the reservation is over it is 419; the room that outlived it counts as ended", async () => {
    // The room reopened above was never destroyed; its time ran out at T0 + 60 min.
    const late = await createConference(account, "design%20review", T0 + 65 * MINUTE, "alice@meet.example.com");
    expect(late.status).toBe(419);
    expect(prosodyErrorText(late)).toContain("ended");
  });

  test("a room with no reservation starts at once with the default duration of 24 hours", async () => {
    const opened = await createConference(account, "Ad-Hoc", T0, "f3b1c2d4-guest@guest.meet.example.com");
    expect(opened.status).toBe(200);
    const { data, expiresAt } = prosodyAccepts(opened, "Ad-Hoc");
    expect(data).toMatchObject({
      name: "ad-hoc",
      mail_owner: "f3b1c2d4-guest@guest.meet.example.com",
      start_time: javaDate(T0),
      duration: 86_400,
      reservation_id: null,
    });
    expect(expiresAt).toBe(T0 + 86_400);
  });

  test("Jicofo's own date form (+0000) is read too", async () => {
    const startTime = prosodyUrlencode("2030-01-15T15:00:00.000+0000");
    const body = `name=jicofo-room&start_time=${startTime}&mail_owner=${prosodyUrlencode("x@meet.example.com")}`;
    const answer = await exchange(
      `POST ${PREFIX}/conference HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: ${USER_AGENT}\r\n` +
        `Authorization: Bearer ${account.apiKey}\r\nContent-Length: ${body.length}\r\n` +
        `Content-Type: application/x-www-form-urlencoded\r\n\r\n${body}`,
    );
    expect(answer.status).toBe(200);
    expect(prosodyAccepts(answer, "jicofo-room").expiresAt).toBe(T0 + 86_400);
  });

  test("missing or malformed fields are 422 with a message naming the field", async () => {
    const cases: Array<[Record<string, string>, string]> = [
      [{ start_time: javaDate(T0), mail_owner: "a@meet.example.com" }, "name"],
      [{ name: "x", mail_owner: "a@meet.example.com" }, "start_time"],
      [{ name: "x", start_time: "2030-01-15T15:00", mail_owner: "a@meet.example.com" }, "start_time"],
      [{ name: "x", start_time: "yesterday", mail_owner: "a@meet.example.com" }, "start_time"],
      [{ name: "x", start_time: javaDate(T0) }, "mail_owner"],
      [{ name: "a/b", start_time: javaDate(T0), mail_owner: "a@meet.example.com" }, "name"],
    ];
    for (const [form, field] of cases) {
      const answer = await prosodyRequest(account, "POST", "/conference", form);
      expect(answer.status, JSON.stringify(form)).toBe(422);
      expect(prosodyErrorText(answer)).toContain(field);
    }
  });

  test("without the API key header it is 401; another account's conference ids are 404", async () => {
    const body = `name=x&start_time=${prosodyUrlencode(javaDate(T0))}&mail_owner=a%40b.c`;
    const anonymous = await exchange(
      `POST ${PREFIX}/conference HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: ${USER_AGENT}\r\n` +
        `Content-Length: ${body.length}\r\nContent-Type: application/x-www-form-urlencoded\r\n\r\n${body}`,
    );
    expect(anonymous.status).toBe(401);

    const other = await newAccount();
    const mine = prosodyAccepts(await createConference(account, "tenancy", T0, "a@meet.example.com"), "tenancy").data;
    expect((await prosodyRequest(other, "GET", `/conference/${mine.id}`)).status).toBe(404);
    expect((await prosodyRequest(other, "DELETE", `/conference/${mine.id}`)).status).toBe(404);
    expect(
      (await call("GET", `${PREFIX}/conference/room/tenancy`, { headers: { authorization: other.apiKey } })).status,
    ).toBe(404);
    expect((await call("GET", `${PREFIX}/conference`, { headers: { authorization: other.apiKey } })).body).toEqual([]);
    // The same room name in the other account is its own room.
    expect((await createConference(other, "tenancy", T0, "b@meet.example.com")).status).toBe(200);
    expect((await prosodyRequest(account, "GET", `/conference/${mine.id}`)).status).toBe(200);
  });

  test("a deleted reservation no longer governs its room", async () => {
    const owner = await newAccount();
    const reserved = await call("POST", `${PREFIX}/reservation`, {
      headers: { authorization: owner.apiKey },
      body: {
        mail_owner: "alice@meet.example.com",
        name: "gone",
        duration: 30,
        start_time: "2030-01-15T15:00",
        timezone: "UTC",
      },
    });
    expect((await createConference(owner, "gone", T0 + 40 * MINUTE, "bob@meet.example.com")).status).toBe(419);
    await call("DELETE", `${PREFIX}/reservation/${reserved.body.id}`, { headers: { authorization: owner.apiKey } });
    expect((await createConference(owner, "gone", T0 + 40 * MINUTE, "bob@meet.example.com")).status).toBe(200);
  });

  test("ids sent back as 1.0 (cjson on Lua 5.3+) are the same ids: the room ends and reopens, again", async () => {
    let previous: number | undefined;
    for (let round = 0; round < 3; round++) {
      const opened = await createConference(account, "float-ids", T0 + round * MINUTE, "a@meet.example.com");
      expect(opened.status).toBe(200);
      const { data } = prosodyAccepts(opened, "float-ids");
      expect(data.id).not.toBe(previous);
      previous = data.id;
      // After a 409 the module asks for the conflict id as it decoded it.
      const conflict = await createConference(account, "float-ids", T0 + round * MINUTE + 1, "b@meet.example.com");
      expect(JSON.parse(conflict.body).conflict_id).toBe(data.id);
      const fetched = await prosodyRequest(account, "GET", `/conference/${data.id}.0`);
      expect(fetched.status).toBe(200);
      expect(prosodyAccepts(fetched, "float-ids").data).toEqual(data);
      const deleted = await prosodyRequest(account, "DELETE", `/conference/${data.id}.0`);
      expect(deleted.status).toBe(200);
      expect(JSON.parse(deleted.body).ended_at).toBeString();
    }
    for (const id of ["1.5", "1e0", "0x1", "-1", "1.0.0"])
      expect((await prosodyRequest(account, "GET", `/conference/${id}`)).status, id).toBe(404);
  });

  test("concurrent first joins on several shards open the room once", async () => {
    const answers = await Promise.all(
      Array.from({ length: 5 }, (_, i) => createConference(account, "busy", T0, `user${i}@meet.example.com`)),
    );
    expect(answers.filter((answer) => answer.status === 200)).toHaveLength(1);
    const winner = JSON.parse(answers.find((answer) => answer.status === 200)!.body).id;
    for (const answer of answers.filter((candidate) => candidate.status !== 200)) {
      expect(answer.status).toBe(409);
      expect(JSON.parse(answer.body).conflict_id).toBe(winner);
    }
  });
});
