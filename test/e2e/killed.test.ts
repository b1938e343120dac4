/**
 * The embedded database (PGlite) when its one process is killed outright: started again on the
 * same folder, it takes over the folder, keeps everything it acknowledged, and finishes the
 * stream whose recorder it lost. The local operator's socket the killed one left is replaced
 * by the next start, which serves it until it stops (test/modules/admin-socket.test.ts has the
 * socket's other cases): on the same two starts, as a start costs seconds of PGlite.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join as joinPath } from "node:path";
import { roomFields } from "../support/event-sync";
import { ADMIN, exercise, local, socketOf } from "../support/local-socket";
import { http, type Parley, recordersOf, startParley, within } from "../support/parley";
import { connect, join, push } from "../support/phoenix";
import { isAlive } from "../support/wait";

const dataDir = mkdtempSync(joinPath(tmpdir(), "parley-killed-"));
const env = {
  BOOTSTRAP_ACCOUNT: "true",
  STREAMING_RECORDER_DRIVER: "command",
  STREAMING_RECORDER_COMMAND: "echo ready; exec sleep 120",
};
const started: Parley[] = [];
/** Whether the killed Parley left its socket file, seen right after the kill. */
let socketLeft: boolean | undefined;
/** The Parley started again on the killed one's folder, for the socket's tests after. */
let restarted: Parley | undefined;

/** Its folders: the test's, and the socket tests' own when the test failed before its second start. */
const folders = [dataDir];

afterAll(() => {
  for (const parley of started) parley.cleanup();
  for (const folder of folders) rmSync(folder, { recursive: true, force: true });
});

test("kill -9, start again on the same folder: nothing acknowledged lost, the orphaned stream finished", async () => {
  const first = await startParley({ embedded: true, env, dataDir });
  started.push(first);
  const apiKey = await within(first, "data/first-api-key", 20_000, async () => {
    const file = Bun.file(`${dataDir}/first-api-key`);
    return (await file.exists()) ? (await file.text()).trim() : undefined;
  });
  const token = (
    await http(first, "POST", "/api/v1/misc/generate-token", {
      body: { apiKey, user: { id: "alice" }, scope: "messaging" },
    })
  ).body.token;
  expect(
    (
      await http(first, "POST", "/api/v1/messaging/rooms/create", {
        auth: `Bearer ${token}`,
        body: { channel_id: "kept" },
      })
    ).status,
  ).toBe(201);

  const socket = connect(first.ws, token);
  const acknowledged: number[] = [];
  try {
    const channel = socket.channel("chat:kept");
    await join(channel);
    for (let i = 1; i <= 20; i++) {
      const reply = await push(channel, "new_message", { content: `message ${i}` });
      expect(reply.status).toBe("ok");
      acknowledged.push(reply.response.message.id);
    }
  } finally {
    socket.disconnect();
  }
  const opened = Math.floor(Date.now() / 1000) - 600;
  const occupant = { id: "bob", occupant_jid: "b@meet.example.com/B" };
  for (const [path, body] of [
    ["/room/created", { event_name: "muc-room-created", ...roomFields("kept"), created_at: opened }],
    [
      "/occupant/joined",
      { event_name: "muc-occupant-joined", ...roomFields("kept"), occupant: { ...occupant, joined_at: opened } },
    ],
    [
      "/occupant/left",
      {
        event_name: "muc-occupant-left",
        ...roomFields("kept"),
        occupant: { ...occupant, joined_at: opened, left_at: opened + 300 },
      },
    ],
  ] as const) {
    expect((await http(first, "POST", `/api/v1/events${path}`, { auth: `Bearer ${apiKey}`, body })).status).toBe(200);
  }
  const stream = await http(first, "POST", "/terraform/v1/hooks/srs/startRecording", {
    auth: `Bearer ${apiKey}`,
    body: { room_name: "kept@conference.meet.example.com" },
  });
  expect(stream.status, JSON.stringify(stream.body)).toBe(200);
  const streamName: string = stream.body.stream_name;
  expect(recordersOf(streamName)).toHaveLength(1);

  expect(await first.stop("SIGKILL", 5_000)).not.toBe("still running");
  socketLeft = existsSync(socketOf(first));
  // The recorder runs in its own process group: the kill leaves it behind, until the worker,
  // finding its supervisor gone, stops itself and its streams (src/core/lifecycle.ts checks
  // every second). On a busy machine that can come before this look; either way the stream
  // must end up finished below, by that stop or by the next start's reconciliation.
  const orphans = recordersOf(streamName);
  expect(orphans.length).toBeLessThanOrEqual(1);

  // The pid file names a process that is gone: the next start takes the folder over.
  const second = await startParley({ embedded: true, env, dataDir });
  started.push(second);
  restarted = second;
  const history = await http(second, "GET", "/api/v1/messaging/rooms/kept/messages?size=100", {
    auth: `Bearer ${token}`,
  });
  expect(history.status).toBe(200);
  const kept = new Set([...JSON.stringify(history.body).matchAll(/"id":(\d+)/g)].map((match) => Number(match[1])));
  expect(acknowledged.filter((id) => !kept.has(id))).toEqual([]);

  const range = { room_name: ["kept"], start_date: new Date((opened - 60) * 1000).toISOString() };
  const report = async () =>
    (await http(second, "POST", "/api/v1/pricing/cdr", { auth: `Bearer ${apiKey}`, body: range })).body;
  // Another recorder's heartbeat lapses within seconds; the reconciler then finishes its streams.
  const room = await within(second, "the lost stream to be finished in the report", 40_000, async () => {
    const found = (await report()).rooms?.find((entry: any) => entry.room_id === "kept");
    return found?.media_usage.streams.some((entry: any) => entry.stream_name === streamName && entry.ended_at)
      ? found
      : undefined;
  });
  expect(room.users.map((user: any) => [user.user_id, user.minutes])).toEqual([["bob", 5]]);
  expect(orphans.filter(isAlive)).toEqual([]);
}, 90_000);

/** The Parley started again after a killed one: the test above's, else a kill and a start of its own. */
async function startedAgain(): Promise<Parley> {
  if (restarted) return restarted;
  const folder = mkdtempSync(joinPath(tmpdir(), "parley-killed-socket-"));
  folders.push(folder);
  const first = await startParley({ embedded: true, dataDir: folder });
  started.push(first);
  await first.stop("SIGKILL", 10_000);
  socketLeft = existsSync(socketOf(first));
  restarted = await startParley({ embedded: true, dataDir: folder });
  started.push(restarted);
  return restarted;
}

describe("the local socket", () => {
  test("embedded: a socket left by a killed Parley is replaced at the next start", async () => {
    const again = await startedAgain();
    expect(socketLeft).toBe(true);
    const answer = await local(again, "GET", `${ADMIN}/accounts`);
    expect(answer.status).toBe(200);
  }, 120_000);

  test("embedded: the socket works while Parley holds the database, and goes away when it stops", async () => {
    const parley = await startedAgain();
    await exercise(parley);
    expect(await parley.stop("SIGTERM", 15_000)).toBe(0);
    expect(existsSync(socketOf(parley))).toBe(false);
  }, 120_000);
});
