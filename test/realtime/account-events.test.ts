/**
 * The `events:<account_id>` topic with the unmodified `phoenix` client: an app hears its own
 * account's catalogue events live (the same JSON as the event log), never another account's,
 * on the process its socket is on whichever process wrote them; it resumes after a sequence
 * number; it needs a token whose scope covers the platform; and it counts as an event stream.
 * docs/realtime.md's example runs as written on the machine's Node.js.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join as joinPath, resolve } from "node:path";
import postgres from "postgres";
import { createApp } from "../../src/process/app";
import { db } from "../../src/db/client";
import { markRunning } from "../../src/modules/streaming/transitions";
import { recordEvent } from "../../src/modules/catalogue";
import { call, newAccount, tokenFor } from "../helpers";
import { type ApiProcess, startApiProcess } from "../support/api-process";
import { connect, disconnect, join, push, recorder } from "../support/phoenix";
import { until } from "../support/wait";
import { insertStartingStream } from "../support/streams";

const server = createApp().listen({ hostname: "127.0.0.1", port: 0 });
const base = `ws://127.0.0.1:${server.server!.port}`;
const sockets: Array<ReturnType<typeof connect>> = [];

afterAll(async () => {
  await Promise.all(sockets.map(disconnect));
  await server.stop(true);
});

type Account = Awaited<ReturnType<typeof newAccount>>;

/** The account's app: a socket whose token has every scope (the platform's among them). */
async function appSocket(account: Account, at = base) {
  const socket = connect(at, await tokenFor(account.apiKey, { id: "app" }, ""));
  sockets.push(socket);
  return socket;
}

/** A stream its recorder reports publishing: `stream.started`, written as the recorder worker writes it. */
async function startStream(accountId: string, room: string) {
  const row = await insertStartingStream(accountId, room);
  expect(await markRunning(row.id)).toBe(true);
  return row;
}

async function logged(account: Account, type: string) {
  const answer = await call("GET", `/api/v1/events?types=${type}`, {
    headers: { authorization: `Bearer ${account.apiKey}` },
  });
  expect(answer.status).toBe(200);
  return answer.body.events as any[];
}

test("an app receives stream.started for its account, as the event log has it, and not another account's", async () => {
  const a = await newAccount();
  const b = await newAccount();
  const topicA = (await appSocket(a)).channel(`events:${a.accountId}`, { presence: false });
  const topicB = (await appSocket(b)).channel(`events:${b.accountId}`, { presence: false });
  const heardA = recorder(topicA, ["stream.started"]);
  const heardB = recorder(topicB, ["stream.started"]);
  await join(topicA);
  await join(topicB);

  await startStream(b.accountId, "b-talk");
  await startStream(a.accountId, "a-talk");
  const started = await heardA.next("stream.started");
  expect(started).toEqual((await logged(a, "stream.started"))[0]);
  expect(started).toMatchObject({ type: "stream.started", account_id: a.accountId, data: { room: "a-talk" } });
  expect((await heardB.next("stream.started")).data.room).toBe("b-talk");
  // B's event was written first: had A's topic carried it, it would have come before A's own.
  expect(heardA.seen.map((entry) => entry.payload.data.room)).toEqual(["a-talk"]);
  expect(heardB.seen.map((entry) => entry.payload.data.room)).toEqual(["b-talk"]);
});

test("a join with after gets exactly the events after that sequence number, then the live ones", async () => {
  const a = await newAccount();
  const emit = (room: string) =>
    db.transaction((tx) =>
      recordEvent(tx, a.accountId, "room.started", { room, breakout_id: "", started_at: new Date().toISOString() }),
    );
  for (const room of ["seen-1", "missed-1", "missed-2"]) await emit(room);
  const [seen] = await logged(a, "room.started");
  const topic = (await appSocket(a)).channel(`events:${a.accountId}`, { after: seen.sequence, presence: false });
  const heard = recorder(topic, ["room.started"]);
  await join(topic);
  await emit("live-1");
  await heard.next("room.started", (event) => event.data.room === "live-1");
  expect(heard.seen.map((entry) => [entry.payload.sequence, entry.payload.data.room])).toEqual([
    [seen.sequence + 1, "missed-1"],
    [seen.sequence + 2, "missed-2"],
    [seen.sequence + 3, "live-1"],
  ]);
});

test("another account's topic, a token without the platform scope, a bad after and pushes are refused", async () => {
  const a = await newAccount();
  const b = await newAccount();
  const app = await appSocket(a);
  await expect(join(app.channel(`events:${b.accountId}`))).rejects.toMatchObject({
    response: { reason: "forbidden" },
  });
  const chat = connect(base, await tokenFor(a.apiKey, { id: "alice" }, "messaging"));
  sockets.push(chat);
  await expect(join(chat.channel(`events:${a.accountId}`))).rejects.toMatchObject({
    response: { reason: "forbidden", message: expect.stringContaining("platform") },
  });
  const badAfter = app.channel(`events:${a.accountId}`, { after: -1 });
  await expect(join(badAfter)).rejects.toMatchObject({
    response: { reason: "validation_failed", message: expect.stringMatching(/^after: /) },
  });
  // Else the client would join again on its own, with the same payload.
  badAfter.leave();
  const topic = app.channel(`events:${a.accountId}`);
  await join(topic);
  expect(await push(topic, "room.started", {})).toMatchObject({ status: "error", response: { reason: "bad_request" } });
});

test("a failed read of the log is made again from the cursor: the topic stays joined, misses nothing", async () => {
  const a = await newAccount();
  const topic = (await appSocket(a)).channel(`events:${a.accountId}`, { presence: false });
  const heard = recorder(topic, ["room.started"]);
  await join(topic);
  // The table locked even against reads: the topic's next read (the sweep's, within 2 s) waits, and is cancelled.
  const holder = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
  try {
    await holder.begin(async (sql) => {
      await sql`lock table events in access exclusive mode`;
      const waiting = await until(
        () => sql`select pid from pg_stat_activity where wait_event_type = 'Lock' and query ilike '%from "events"%'`,
        (rows) => rows.length > 0,
      );
      expect(waiting.length).toBeGreaterThan(0);
      for (const { pid } of waiting) await sql`select pg_cancel_backend(${pid})`;
    });
  } finally {
    await holder.end({ timeout: 5 });
  }
  await db.transaction((tx) =>
    recordEvent(tx, a.accountId, "room.started", {
      room: "after-a-failed-read",
      breakout_id: "",
      started_at: new Date().toISOString(),
    }),
  );
  expect((await heard.next("room.started")).data.room).toBe("after-a-failed-read");
});

describe("another API process, with an account's event streams capped at 2", () => {
  let other: ApiProcess;
  beforeAll(async () => {
    other = await startApiProcess({ LIMIT_EVENT_STREAMS_PER_ACCOUNT: "2" });
  }, 70_000);
  afterAll(() => {
    other?.child.kill("SIGKILL");
  });

  test("a socket on another process hears the events this one writes", async () => {
    const a = await newAccount();
    const topic = (await appSocket(a, other.ws)).channel(`events:${a.accountId}`, { presence: false });
    const heard = recorder(topic, ["stream.started"]);
    await join(topic);
    await startStream(a.accountId, "elsewhere");
    expect((await heard.next("stream.started")).data).toMatchObject({
      room: "elsewhere",
      stream_name: "elsewhere-abcd",
    });
  });

  test("topics count as the account's event streams: refused at the cap, the slot back on leave", async () => {
    const a = await newAccount();
    const firstSocket = await appSocket(a, other.ws);
    const first = firstSocket.channel(`events:${a.accountId}`);
    await join(first);
    await join((await appSocket(a, other.ws)).channel(`events:${a.accountId}`));
    const third = await appSocket(a, other.ws);
    await expect(join(third.channel(`events:${a.accountId}`))).rejects.toMatchObject({
      response: { reason: "quota_exceeded", retry_after: 5 },
    });
    first.leave();
    // The client counts a leave done as it sends it; the server handles a socket's frames in order,
    // so a heartbeat answered after it means the leave has been handled.
    await new Promise((resolve) => firstSocket.ping(resolve));
    await join(third.channel(`events:${a.accountId}`));
  });
});

test("docs/realtime.md's events block, run with the machine's node, prints the account's stream.started", async () => {
  const page = readFileSync(resolve(import.meta.dir, "../../docs/realtime.md"), "utf8");
  const block = [...page.matchAll(/```js\n([\s\S]*?)```/g)]
    .map((match) => match[1]!)
    .find((code) => code.includes("events:"));
  expect(block).toBeDefined();
  const a = await newAccount();
  const dir = mkdtempSync(joinPath(tmpdir(), "parley-events-client-"));
  // The script resolves phoenix and ws as an app would, from its node_modules.
  symlinkSync(resolve(import.meta.dir, "../../node_modules"), joinPath(dir, "node_modules"));
  const file = joinPath(dir, "events.mjs");
  writeFileSync(file, block!.replaceAll("localhost:3000", `127.0.0.1:${server.server!.port}`));
  const child = Bun.spawn(["node", file], {
    cwd: dir,
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      TOKEN: await tokenFor(a.apiKey, { id: "app" }, ""),
      ACCOUNT: a.accountId,
    },
    stdout: "pipe",
    stderr: "pipe",
  });
  try {
    let printed = "";
    const reading = (async () => {
      for await (const chunk of child.stdout) printed += new TextDecoder().decode(chunk);
    })();
    // Streams keep starting until the client, once joined, prints one: the block says nothing on joining.
    const deadline = Date.now() + 15_000;
    for (let i = 0; !printed.includes("stream.started") && Date.now() < deadline; i++) {
      await startStream(a.accountId, `docs-${i}`);
      await Bun.sleep(200);
    }
    expect(printed).toMatch(/^\d+ stream\.started \{.*"stream_name":"docs-\d+-abcd"/m);
    child.kill();
    await reading;
    expect(await new Response(child.stderr).text()).toBe("");
  } finally {
    child.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  }
});
