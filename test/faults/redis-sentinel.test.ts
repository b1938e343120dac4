/**
 * The Redis master killed under Sentinel, with two Parley nodes (each a full `npm start`)
 * under mixed load: chat over a socket on each, event_sync deliveries to both, a webhook
 * receiver that verifies, a stream on each node's recorder, a SIP call on each node's gateway.
 * The sentinels promote the replica; every Redis connection of both nodes finds it by itself:
 * Redis work answers again within 10 s, no process restarts, and nothing acknowledged is lost.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import postgres from "postgres";
import { newAccount } from "../helpers";
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
import { killNodes, type Parley, startParley } from "../support/parley";
import { freePort } from "../support/ports";
import { SENTINEL_NAME, type SentinelGroup, startSentinelGroup } from "../support/redis-sentinel";
import { childPids, until } from "../support/wait";

let group: SentinelGroup;
const nodes: Parley[] = [];
let apiKey: string;
let accountId: string;
const streamNames: string[] = [];

beforeAll(async () => {
  group = await startSentinelGroup();
  const shared = {
    // Nothing listens here: every connection must come through the sentinels to reach Redis at all.
    REDIS_URL: `redis://127.0.0.1:${await freePort()}`,
    REDIS_SENTINELS: group.sentinels,
    REDIS_SENTINEL_NAME: SENTINEL_NAME,
    ...mixedLoadEnv("sentinel"),
  };
  // The nodes start while the sentinels find each other; both are done before the test. Every node
  // that started is kept for afterAll even when the group failed, so no Parley outlives the file.
  const starting = [startParley({ embedded: false, env: shared }), startParley({ embedded: false, env: shared })];
  const settled = await Promise.allSettled([...starting, group.failoverReady]);
  for (const node of settled.slice(0, starting.length))
    if (node.status === "fulfilled" && node.value) nodes.push(node.value);
  const failed = settled.find((result) => result.status === "rejected");
  if (failed) throw failed.reason;
  ({ apiKey, accountId } = await newAccount());
}, 90_000);

afterAll(async () => {
  await killNodes(nodes, streamNames);
  await group?.stop();
});

test("Redis master killed: the replica promoted, both nodes go on within 10 s, nothing acknowledged lost", async () => {
  const { token, receiver } = await prepareLoad(nodes, apiKey, ["call.ended"]);
  try {
    await startStreams(nodes, apiKey, "sentinel", streamNames);
    // A call on each node's gateway, held through the fault.
    // Held 8 s: the kill comes a moment after the answer and the failover took 2.7 to 3 s
    // (recoveredMs) on a loaded machine, so each call outlives the fault and hangs up after it.
    const calls = await startCalls(nodes, apiKey, 8_000);
    const watch = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
    expect(await calls.answered(watch, accountId)).toBe(nodes.length);
    await watch.end();
    const before = nodes.map((node) => childPids(node.process.pid));
    const load = startLoad(nodes as LoadNode[], apiKey, token);
    await loadFlowing(load);

    await group.killMaster();
    const killedAt = Date.now();
    // Back once Redis work answers 200 on every node (the viewer count reads a Redis counter) and
    // every kind of connection of both nodes is on the promoted replica (an API process holds one
    // of each; subscriptions and queues have more).
    const viewers = (node: Parley, name: string) =>
      request(node, "GET", `/terraform/v1/hooks/srs/live/viewers/count/${name}`, undefined, "");
    const purposes = ["commands", "prompt", "queue", "realtime", "limits", "outbox-cdr", "outbox-webhooks"];
    const back = await until(
      async () => {
        const statuses = await Promise.all(
          nodes.map((node, n) => viewers(node, streamNames[n]!).then((answer) => answer.status)),
        );
        const names = group.clientNames(group.replicaPort);
        const missing = purposes.filter(
          (purpose) => names.filter((name) => name.startsWith(`parley:${purpose}`)).length < nodes.length,
        );
        return { statuses, missing };
      },
      ({ statuses, missing }) => statuses.every((status) => status === 200) && missing.length === 0,
      20_000,
      100,
    );
    const recoveredMs = Date.now() - killedAt;
    expect(back).toEqual({ statuses: nodes.map(() => 200), missing: [] });
    expect(group.currentMaster()).toBe(group.replicaPort);
    // Queues work again from both nodes: a new stream starts on a recorder (each start waits for it).
    for (const [n, node] of nodes.entries()) {
      const again = await until(
        () =>
          request(
            node,
            "POST",
            "/terraform/v1/hooks/srs/startRecording",
            { room_name: `sentinel-after-${n}` },
            apiKey,
            15_000,
          ),
        (answer) => answer.status !== 503,
        10_000,
        250,
      );
      expect(again).toMatchObject({ status: 200 });
      streamNames.push(again.body.stream_name);
    }
    const streamsStartMs = Date.now() - killedAt;
    const acknowledgedAtKill = load.chatAcknowledged.length + load.eventsAcknowledged.length;
    await until(
      () => load.chatAcknowledged.length + load.eventsAcknowledged.length,
      (n) => n >= acknowledgedAtKill + 20,
      15_000,
      100,
    );
    await load.stop();

    // The streams that ran through the failover still run, and stop when asked.
    for (const [n, node] of nodes.entries()) {
      const stopped = await request(
        node,
        "POST",
        "/terraform/v1/hooks/srs/stopRecording",
        { room_name: `sentinel-${n}` },
        apiKey,
      );
      expect(stopped.status).toBe(200);
    }
    const sql = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
    try {
      const states = await sql<{ room: string; state: string; reason: string | null }[]>`
        select room, state, reason from streams where account_id = ${accountId} order by room`;
      // A failed stream shows its reason, so a failure says why.
      const shown = states.map((row) => [row.room, row.state === "failed" ? `failed: ${row.reason}` : row.state]);
      expect(shown).toEqual([
        ["sentinel-0", "stopped"],
        ["sentinel-1", "stopped"],
        ["sentinel-after-0", "running"],
        ["sentinel-after-1", "running"],
      ]);
      await expectNothingLost({ load, calls, nodes }, sql, accountId, receiver, {
        fault: "redis master killed under Sentinel",
        recoveredMs,
        streamsStartMs,
      });
    } finally {
      await sql.end();
    }
    expect(recoveredMs).toBeLessThan(10_000);
    // No process of either node died and was started again.
    expect(nodes.map((node) => childPids(node.process.pid))).toEqual(before);
    expect(nodes.every((node) => node.process.exitCode === null)).toBe(true);
  } finally {
    receiver.stop();
  }
}, 90_000);
