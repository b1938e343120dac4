/**
 * GET /api/v1/events/stream over a real HTTP connection: a consumer that disconnects and
 * resumes with Last-Event-ID gets exactly the events it missed, and a stream never carries
 * another account's events.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { createApp } from "../../src/process/app";
import { db } from "../../src/db/client";
import { recordEvent } from "../../src/modules/catalogue";
import { newAccount } from "../helpers";
import { until } from "../support/wait";

let base = "";
let server: ReturnType<ReturnType<typeof createApp>["listen"]>;
beforeAll(() => {
  server = createApp().listen({ port: 0, hostname: "127.0.0.1" });
  base = `http://127.0.0.1:${server.server!.port}`;
});
afterAll(async () => {
  await server.stop(true);
});

async function emit(accountId: string, room: string) {
  await db.transaction((tx) =>
    recordEvent(tx, accountId, "room.started", { room, breakout_id: "", started_at: new Date().toISOString() }),
  );
}

interface SseEvent {
  id: string;
  event: string;
  data: any;
}

/** An SSE consumer: collects events until closed. */
async function consume(apiKey: string, lastEventId?: string) {
  const abort = new AbortController();
  const headers: Record<string, string> = { authorization: `Bearer ${apiKey}` };
  if (lastEventId !== undefined) headers["last-event-id"] = lastEventId;
  const response = await fetch(`${base}/api/v1/events/stream`, { headers, signal: abort.signal });
  const received: SseEvent[] = [];
  let opened = false;
  const reading = (async () => {
    if (!response.body) return;
    const decoder = new TextDecoder();
    let buffer = "";
    try {
      for await (const chunk of response.body) {
        buffer += decoder.decode(chunk, { stream: true });
        opened = true;
        let end = buffer.indexOf("\n\n");
        while (end >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const fields = Object.fromEntries(
            block
              .split("\n")
              .filter((line) => !line.startsWith(":") && line.includes(":"))
              .map((line) => [line.slice(0, line.indexOf(":")), line.slice(line.indexOf(":") + 1).trim()]),
          );
          if (fields.data) received.push({ id: fields.id, event: fields.event, data: JSON.parse(fields.data) });
          end = buffer.indexOf("\n\n");
        }
      }
    } catch {
      // Aborted by the test.
    }
  })();
  await until(() => opened || response.status !== 200, Boolean);
  return {
    response,
    received,
    async close() {
      abort.abort();
      await reading;
    },
  };
}

test("a consumer that disconnects and resumes with Last-Event-ID receives exactly the missed events", async () => {
  const a = await newAccount();
  await emit(a.accountId, "before-connect");
  const first = await consume(a.apiKey);
  expect(first.response.status).toBe(200);
  expect(first.response.headers.get("content-type")).toBe("text/event-stream");
  for (let i = 1; i <= 3; i++) await emit(a.accountId, `live-${i}`);
  await until(
    () => first.received.length,
    (n) => n >= 3,
  );
  await first.close();
  // Without a cursor the stream starts from now: the earlier event is the log's, not the stream's.
  expect(first.received.map((event) => [event.id, event.event, event.data.data.room])).toEqual([
    ["2", "room.started", "live-1"],
    ["3", "room.started", "live-2"],
    ["4", "room.started", "live-3"],
  ]);

  for (let i = 1; i <= 4; i++) await emit(a.accountId, `missed-${i}`);
  const resumed = await consume(a.apiKey, first.received.at(-1)!.id);
  await emit(a.accountId, "after-resume");
  await until(
    () => resumed.received.length,
    (n) => n >= 5,
  );
  await Bun.sleep(700);
  await resumed.close();
  expect(resumed.received.map((event) => event.data.data.room)).toEqual([
    "missed-1",
    "missed-2",
    "missed-3",
    "missed-4",
    "after-resume",
  ]);
  expect(resumed.received.map((event) => Number(event.id))).toEqual([5, 6, 7, 8, 9]);
});

test("a stream carries only its own account's events, written by any process", async () => {
  const a = await newAccount();
  const b = await newAccount();
  const streamA = await consume(a.apiKey, "0");
  const streamB = await consume(b.apiKey, "0");
  await emit(a.accountId, "a-only");
  await emit(b.accountId, "b-only");
  // An event committed by another process reaches the stream by its poll.
  const other = Bun.spawnSync(
    [
      process.execPath,
      "-e",
      `const services = await (await import("./src/process/root")).buildProcess("webhooks");
       const { db } = await import("./src/db/client");
       const { recordEvent } = await import("./src/modules/catalogue");
       const payload = { reservation_id: 3, room: "from-another-process" };
       await db.transaction((tx) => recordEvent(tx, ${JSON.stringify(b.accountId)}, "reservation.deleted", payload));
       await services.stop(); process.exit(0);`,
    ],
    { cwd: `${import.meta.dir}/../..`, env: process.env },
  );
  expect(other.exitCode).toBe(0);
  await until(
    () => streamB.received.length,
    (n) => n >= 2,
  );
  await Bun.sleep(300);
  await streamA.close();
  await streamB.close();
  expect(streamA.received.map((event) => event.data.data.room)).toEqual(["a-only"]);
  expect(streamB.received.map((event) => event.data.data.room)).toEqual(["b-only", "from-another-process"]);
  expect(streamB.received.every((event) => event.data.account_id === b.accountId)).toBe(true);
});

test("a stream needs the API key and a numeric Last-Event-ID", async () => {
  const a = await newAccount();
  const anonymous = await fetch(`${base}/api/v1/events/stream`);
  expect(anonymous.status).toBe(401);
  expect((await anonymous.json()).error.code).toBe("unauthorized");
  const bad = await fetch(`${base}/api/v1/events/stream`, {
    headers: { authorization: `Bearer ${a.apiKey}`, "last-event-id": "evt_1" },
  });
  expect(bad.status).toBe(422);
  expect((await bad.json()).error.code).toBe("validation_failed");
});
