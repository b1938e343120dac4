/**
 * Redis killed with SIGKILL while event_sync deliveries flow: the fold's rings before the
 * crash reach no worker, deliveries during the outage find no Redis, and Redis comes back empty.
 * Every delivery answered 2xx must still end up in the usage report, exactly once.
 */
import { afterAll, expect, test } from "bun:test";
import { type Subprocess, spawn } from "bun";
import { count, eq } from "drizzle-orm";
import { db } from "../../src/db/client";
import { conferenceEvents } from "../../src/modules/conference-log/schema";
import { call, newAccount } from "../helpers";
import { at, type Delivery, occupantJoined, occupantLeft, roomCreated, roomDestroyed } from "../support/event-sync";
import { freePort } from "../support/ports";
import { unfoldedCount } from "../support/stored-events";
import { type PrivateRedis, privateRedis } from "../support/redis-server";
import { until } from "../support/wait";

const ROOMS = 12;
const OCCUPANTS = 3;
const entry = new URL("../../src/index.ts", import.meta.url).pathname;
const children: Subprocess[] = [];
let redis: PrivateRedis | undefined;

afterAll(async () => {
  for (const child of children) child.kill("SIGKILL");
  await Promise.all(children.map((child) => child.exited));
  await redis?.kill();
});

/** Every room: created, three stays of whole minutes, destroyed; listed phase by phase so each room spans the crash. */
function traffic() {
  const created: Delivery[] = [];
  const joined: Delivery[] = [];
  const left: Delivery[] = [];
  const destroyed: Delivery[] = [];
  const expected = new Map<string, number>();
  for (let r = 0; r < ROOMS; r++) {
    const room = `crash-${r}`;
    const opened = at("09:00:00") + r * 60;
    let minutes = 0;
    let closed = opened;
    created.push(roomCreated(room, opened));
    for (let i = 0; i < OCCUPANTS; i++) {
      const person = { id: `user-${i}`, name: `User ${i}`, occupant_jid: `${room}-${i}@meet.example.com/r${i}` };
      const joinedAt = opened + 60 + i * 60;
      const stay = 10 + r + 5 * i;
      joined.push(occupantJoined(room, person, joinedAt, i + 1));
      left.push(occupantLeft(room, person, joinedAt, joinedAt + stay * 60, OCCUPANTS - i - 1));
      minutes += stay;
      closed = Math.max(closed, joinedAt + stay * 60);
    }
    destroyed.push(roomDestroyed(room, opened, closed + 60, []));
    expected.set(room, minutes);
  }
  return { deliveries: [...created, ...joined, ...left, ...destroyed], expected };
}

function startRole(role: string, env: Record<string, string>): Subprocess {
  const child = spawn([process.execPath, entry, `--role=${role}`], {
    env: { ...process.env, LOG_LEVEL: "silent", ...env },
    stdout: "ignore",
    stderr: "inherit",
  });
  children.push(child);
  return child;
}

test("a Redis crash loses no acknowledged event: the sweep folds what the lost rings would have", async () => {
  redis = await privateRedis();
  const account = await newAccount();
  const port = await freePort();
  const shared = {
    REDIS_URL: redis.url,
    REDIS_PREFIX: `parley-crash-${process.pid}`,
    USAGE_SWEEP_INTERVAL_MS: "500",
    USAGE_SWEEP_MIN_AGE_MS: "1000",
  };
  const api = startRole("api", { ...shared, PORT: String(port), HOST: "127.0.0.1" });
  const base = `http://127.0.0.1:${port}`;
  const up = await until(
    () =>
      fetch(`${base}/healthz`).then(
        (response) => response.ok,
        () => false,
      ),
    Boolean,
    20_000,
    100,
  );
  expect(up).toBe(true);

  const { deliveries, expected } = traffic();
  let acknowledged = 0;
  let slowest = 0;
  /** Posts as event_sync does, retrying a refusal or a timeout as the module would. */
  const post = async (delivery: Delivery) => {
    for (let attempt = 0; attempt < 10; attempt++) {
      const started = Date.now();
      const response = await fetch(`${base}${delivery.path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${account.apiKey}`, "content-type": "application/json" },
        body: JSON.stringify(delivery.body),
        signal: AbortSignal.timeout(5_000),
      }).catch(() => undefined);
      slowest = Math.max(slowest, Date.now() - started);
      if (response?.ok) {
        acknowledged++;
        return response.status;
      }
      await Bun.sleep(200);
    }
    throw new Error(`delivery never acknowledged: ${delivery.path}`);
  };

  const third = Math.floor(deliveries.length / 3);
  // Phase 1: Redis up but no cdr worker yet, so the fold's rings reach nobody...
  for (const delivery of deliveries.slice(0, third)) await post(delivery);
  // ...and Redis dies.
  await redis.kill();
  // Phase 2: the cdr worker starts with Redis down, and deliveries keep coming.
  const cdr = startRole("cdr", shared);
  const outage: number[] = [];
  for (const delivery of deliveries.slice(third, 2 * third)) outage.push(await post(delivery));
  // Phase 3: Redis is back, empty.
  await redis.start();
  const restartedAt = Date.now();
  for (const delivery of deliveries.slice(2 * third)) await post(delivery);

  expect(acknowledged).toBe(deliveries.length);
  // Storing the event is the acknowledgement: no delivery waited for Redis or was refused for it.
  expect(outage.every((status) => status === 200)).toBe(true);
  expect(slowest).toBeLessThan(2_500);

  const report = async () => {
    const answer = await call("POST", "/api/v1/pricing/cdr", {
      body: { start_date: "2026-11-20T00:00:00Z", end_date: "2026-11-21T00:00:00Z" },
      headers: { authorization: `Bearer ${account.apiKey}` },
    });
    return new Map<string, number>(answer.body.days.map((day: any) => [day.room_name, day.participant_minutes]));
  };
  // The cdr worker folds everything (a report would fold what is pending itself: none is asked for until then).
  const unfolded = await until(
    () => unfoldedCount(account.accountId),
    (n) => n === 0,
    30_000,
    250,
  );
  console.log(
    `every event folded ${Date.now() - restartedAt} ms after Redis came back; slowest delivery ${slowest} ms`,
  );
  // Acknowledged but lost: answered 2xx, yet not stored or never folded.
  const [stored] = await db
    .select({ n: count() })
    .from(conferenceEvents)
    .where(eq(conferenceEvents.accountId, account.accountId));
  expect({ stored: stored!.n, unfolded }).toEqual({ stored: deliveries.length, unfolded: 0 });
  expect(Object.fromEntries(await report())).toEqual(Object.fromEntries(expected));
  // Neither process died of the outage.
  expect([api.exitCode, cdr.exitCode]).toEqual([null, null]);
}, 60_000);
