/**
 * The PostgreSQL primary killed (SIGKILL) and its synchronous standby promoted, with two Parley
 * nodes (each a full `npm start`) on DATABASE_URL naming both hosts, under mixed load: chat
 * over a socket on each, event_sync deliveries to both, a webhook receiver that verifies, a
 * stream and a SIP call on each node. Until the standby is promoted, writes answer 503 with Retry-After;
 * once it is, connections find it by themselves: writes resume within 15 s of the kill, no
 * process restarts, and nothing acknowledged is lost (synchronous replication: acknowledged
 * means on the standby).
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import postgres from "postgres";
import {
  expectNothingLost,
  type LoadNode,
  loadFlowing,
  mixedLoadEnv,
  prepareLoad,
  request,
  startCalls,
  startLoad,
  startStreams,
} from "../support/mixed-load";
import { killNodes, type Parley, spawnParley } from "../support/parley";
import { type PostgresPair, startPostgresPair } from "../support/postgres-pair";
import { childPids, until } from "../support/wait";

/** How long the test, as failover manager, leaves the cluster without a primary: long enough to see the 503s. */
const NO_PRIMARY_MS = 3_000;

let pair: PostgresPair;
const nodes: Parley[] = [];
let apiKey: string;
const streamNames: string[] = [];

beforeAll(async () => {
  pair = await startPostgresPair();
  const env = {
    DATABASE_URL: pair.url,
    BOOTSTRAP_ACCOUNT: "true",
    ...mixedLoadEnv("pgfailover"),
  };
  // The first node applies the migrations and then makes the first account. Once its API key is written both
  // are stored, and the second node starts, finding them, while the first still brings up its roles.
  const first = await spawnParley({ embedded: false, env });
  const keyFile = join(first.parley.dataDir, "first-api-key");
  await until(() => existsSync(keyFile) || first.parley.process.exitCode !== null, Boolean, 60_000, 100);
  const second = await spawnParley({ embedded: false, env });
  try {
    nodes.push(await first.ready());
  } catch (error) {
    second.parley.cleanup();
    throw error;
  }
  nodes.push(await second.ready());
  apiKey = await nodes[0]!.firstApiKey();
}, 90_000);

afterAll(async () => {
  await killNodes(nodes, streamNames);
  pair?.destroy();
});

test("PostgreSQL primary killed, standby promoted: 503 and Retry-After, writes back in 15 s, none lost", async () => {
  const { token, receiver } = await prepareLoad(nodes, apiKey, ["call.ended"]);
  const primary = postgres(pair.urlOf(pair.primaryPort), { max: 1, onnotice: () => {} });
  const accountId = (await primary<{ id: string }[]>`select id from accounts`)[0]!.id;
  await primary.end();
  try {
    await startStreams(nodes, apiKey, "failover", streamNames);
    // A call on each node's gateway, held through the fault.
    const calls = await startCalls(nodes, apiKey, 10_000);
    const watch = postgres(pair.urlOf(pair.primaryPort), { max: 1, onnotice: () => {} });
    expect(await calls.answered(watch, accountId)).toBe(nodes.length);
    await watch.end();
    const before = nodes.map((node) => childPids(node.process.pid));
    const load = startLoad(nodes as LoadNode[], apiKey, token);
    await loadFlowing(load);

    await pair.killPrimary();
    const killedAt = Date.now();
    // No primary: a write (a room created) on each node is refused at once, 503 with Retry-After.
    let probe = 0;
    const write = (node: Parley) =>
      request(node, "POST", "/api/v1/messaging/rooms/create", { channel_id: `probe-${probe++}` }, `Bearer ${token}`);
    const meanwhile = await Promise.all(nodes.map(write));
    for (const answer of meanwhile) {
      expect({ status: answer.status, code: answer.body?.error?.code, retryAfter: answer.retryAfter }).toEqual({
        status: 503,
        code: "dependency_down",
        retryAfter: "5",
      });
    }
    await Bun.sleep(Math.max(0, killedAt + NO_PRIMARY_MS - Date.now()));
    pair.promoteStandby();
    const promotedAt = Date.now();
    const back = await until(
      () => Promise.all(nodes.map((node) => write(node).then((answer) => answer.status))),
      (statuses) => statuses.every((status) => status === 201),
      20_000,
      100,
    );
    const writesBackMs = Date.now() - killedAt;
    const afterPromotionMs = Date.now() - promotedAt;
    expect(back).toEqual(nodes.map(() => 201));
    const acknowledgedAtBack = load.chatAcknowledged.length + load.eventsAcknowledged.length;
    await until(
      () => load.chatAcknowledged.length + load.eventsAcknowledged.length,
      (n) => n >= acknowledgedAtBack + 20,
      15_000,
      100,
    );
    await load.stop();
    // Every answer the load got while there was no primary was an
    // answer: 503 with Retry-After, never a 5xx of another kind.
    const outage = load.seen.filter(
      (answer) => answer.what === "event" && answer.at > killedAt && answer.at < promotedAt,
    );
    expect(outage.filter((answer) => answer.status !== 503 && answer.status !== 200)).toEqual([]);
    expect(outage.filter((answer) => answer.status === 503).every((answer) => answer.retryAfter === "5")).toBe(true);

    // The streams that ran through the failover stop when asked, on the promoted standby.
    for (const [n, node] of nodes.entries()) {
      const stopped = await request(
        node,
        "POST",
        "/terraform/v1/hooks/srs/stopRecording",
        { room_name: `failover-${n}` },
        apiKey,
        15_000,
      );
      expect(stopped.status).toBe(200);
    }
    const sql = postgres(pair.urlOf(pair.standbyPort), { max: 1, onnotice: () => {} });
    try {
      await expectNothingLost({ load, calls, nodes }, sql, accountId, receiver, {
        fault: "postgres primary killed, standby promoted",
        writesBackMs,
        afterPromotionMs,
        noPrimaryMs: promotedAt - killedAt,
      });
    } finally {
      await sql.end();
    }
    expect(writesBackMs).toBeLessThan(15_000);
    expect(nodes.map((node) => childPids(node.process.pid))).toEqual(before);
    expect(nodes.every((node) => node.process.exitCode === null)).toBe(true);
  } finally {
    receiver.stop();
  }
}, 90_000);
