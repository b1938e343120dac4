/**
 * A primary of a Redis Cluster (three primaries, three replicas) killed under the mixed load of
 * the failover tests, with two Parley nodes (each a full `npm start`) on REDIS_CLUSTER_NODES:
 * chat over a socket on each, event_sync deliveries to both, a webhook receiver that verifies,
 * a stream on each node's recorder, a SIP call on each node's gateway. The primary killed is the
 * one that holds the recorder queue's slot. The cluster promotes its replica; every connection
 * of both nodes follows the new slot map by itself: Redis work answers again within 10 s, no
 * process restarts, and nothing acknowledged is lost.
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
import { connect, disconnect, join } from "../support/phoenix";
import { freePort } from "../support/ports";
import { type RedisCluster, startRedisCluster } from "../support/redis-cluster";
import { childPids, until } from "../support/wait";

let cluster: RedisCluster;
const nodes: Parley[] = [];
let apiKey: string;
let accountId: string;
let prefix: string;
let queueKey: string;
const streamNames: string[] = [];

beforeAll(async () => {
  cluster = await startRedisCluster();
  const env = mixedLoadEnv("cluster");
  // BullMQ's keys on a Cluster are all under the tagged prefix (src/queue/queues.ts).
  prefix = env.REDIS_PREFIX!;
  queueKey = `{${prefix}:bull}:recorder:wait`;
  const shared = {
    // Nothing listens here: every connection must reach Redis through the cluster's nodes.
    REDIS_URL: `redis://127.0.0.1:${await freePort()}`,
    REDIS_CLUSTER_NODES: cluster.nodes,
    ...env,
  };
  // Every node that started is kept for afterAll even when another failed, so no Parley outlives the file.
  const settled = await Promise.allSettled([
    startParley({ embedded: false, env: shared }),
    startParley({ embedded: false, env: shared }),
  ]);
  for (const node of settled) if (node.status === "fulfilled" && node.value) nodes.push(node.value);
  const failed = settled.find((result) => result.status === "rejected");
  if (failed) throw failed.reason;
  ({ apiKey, accountId } = await newAccount());
}, 90_000);

afterAll(async () => {
  await killNodes(nodes, streamNames);
  await cluster?.stop();
});

test("a cluster primary killed: replica promoted, nodes go on within 10 s, nothing acknowledged lost", async () => {
  const { token, receiver } = await prepareLoad(nodes, apiKey, ["call.ended"]);
  try {
    await startStreams(nodes, apiKey, "cluster", streamNames);
    // Held 8 s: each call outlives the fault (the promotion takes a second or two) and hangs up after it.
    const calls = await startCalls(nodes, apiKey, 8_000);
    const watch = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
    expect(await calls.answered(watch, accountId)).toBe(nodes.length);
    await watch.end();
    const before = nodes.map((node) => childPids(node.process.pid));
    const load = startLoad(nodes as LoadNode[], apiKey, token);
    // Each node's chat room is heard on the other node too: its frames cross through Redis
    // (the sharded channel of the topic), which the promoted replica must go on carrying.
    const heardElsewhere = nodes.map(() => new Set<string>());
    const listeners = nodes.map((_, n) => connect(nodes[(n + 1) % nodes.length]!.ws, token));
    await Promise.all(
      listeners.map((socket, n) => {
        const channel = socket.channel(`chat:load-${n}`, {});
        channel.on("new_message", (message: { content: string }) => void heardElsewhere[n]!.add(message.content));
        return join(channel);
      }),
    );
    await loadFlowing(load);

    const killed = cluster.primaryOf(queueKey)!;
    // The queue's keys are all on that primary (one hash tag), and pub/sub is sharded: the channels
    // are shard channels of the nodes that hold their slots, none a cluster-wide channel.
    expect(cluster.command(killed, "keys", `{${prefix}:bull}:recorder:*`).split("\n").length).toBeGreaterThan(1);
    const listed = (...args: string[]) =>
      cluster.ports.flatMap((port) => cluster.command(port, ...args).split("\n")).filter(Boolean);
    const sharded = listed("pubsub", "shardchannels", `${prefix}:*`);
    expect(sharded).toContain(`${prefix}:invalidate:accounts`);
    // A chat topic's channel carries its hash tag, as its interest set does (one script touches both).
    expect(sharded.some((channel) => channel.startsWith(`${prefix}:rt:{`))).toBe(true);
    expect(listed("pubsub", "channels", `${prefix}:*`)).toEqual([]);
    // Both nodes hold connections to the primary about to die (the recorders' queue connections at least).
    expect(cluster.clientNames(killed).filter((name) => name.startsWith("parley:queue")).length).toBeGreaterThan(0);
    await cluster.kill(killed);
    const killedAt = Date.now();
    // Back once Redis work answers 200 on every node (the viewer count reads a Redis counter) and
    // the queue's slot is served by the promoted replica.
    const viewers = (node: Parley, name: string) =>
      request(node, "GET", `/terraform/v1/hooks/srs/live/viewers/count/${name}`, undefined, "");
    // The cluster's own part (failure detected, replica elected), apart from Parley's following it.
    let promotedMs: number | undefined;
    const back = await until(
      async () => {
        const statuses = await Promise.all(
          nodes.map((node, n) => viewers(node, streamNames[n]!).then((answer) => answer.status)),
        );
        const primary = cluster.primaryOf(queueKey);
        const promoted = primary !== undefined && primary !== killed;
        if (promoted) promotedMs ??= Date.now() - killedAt;
        return { statuses, promoted };
      },
      ({ statuses, promoted }) => statuses.every((status) => status === 200) && promoted,
      20_000,
      100,
    );
    const recoveredMs = Date.now() - killedAt;
    expect(back).toEqual({ statuses: nodes.map(() => 200), promoted: true });
    // Fan-out is back once each node's room crosses again: the other node's shard subscriber follows the
    // promoted replica by itself, and a frame published before it has is not carried (pub/sub keeps nothing).
    // Each room's sender waits for one message's answer before the next, so every later message follows it.
    const ackedAtBack = load.chatAcknowledged.length;
    const firstCrossed = await until(
      () =>
        nodes.map((_, n) =>
          load.chatAcknowledged
            .slice(ackedAtBack)
            .find((content) => content.startsWith(`n${n}-`) && heardElsewhere[n]!.has(content)),
        ),
      (found) => found.every((content) => content !== undefined),
      10_000,
      50,
    );
    const fanOutMs = Date.now() - killedAt;
    expect(firstCrossed.every((content) => content !== undefined)).toBe(true);
    // Queues work again from both nodes: a new stream starts on a recorder (each start waits for it).
    for (const [n, node] of nodes.entries()) {
      const again = await until(
        () =>
          request(
            node,
            "POST",
            "/terraform/v1/hooks/srs/startRecording",
            { room_name: `cluster-after-${n}` },
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
    // Fan-out is not durable (a frame in flight at the kill may be lost), but once back every frame crosses.
    const nodeOf = (content: string) => Number(content.slice(1, content.indexOf("-")));
    const sentSince = load.chatAcknowledged.filter(
      (content, at) => at > load.chatAcknowledged.indexOf(firstCrossed[nodeOf(content)]!),
    );
    const unheard = () => sentSince.filter((content) => !heardElsewhere[nodeOf(content)]!.has(content));
    expect(sentSince.length).toBeGreaterThan(0);
    expect(await until(unheard, (left) => left.length === 0, 5_000, 50)).toEqual([]);
    await Promise.all(listeners.map((socket) => disconnect(socket)));

    // The streams that ran through the failover still run, and stop when asked.
    for (const [n, node] of nodes.entries()) {
      const stopped = await request(
        node,
        "POST",
        "/terraform/v1/hooks/srs/stopRecording",
        { room_name: `cluster-${n}` },
        apiKey,
      );
      expect(stopped.status).toBe(200);
    }
    const sql = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
    try {
      const states = await sql<{ room: string; state: string; reason: string | null }[]>`
        select room, state, reason from streams where account_id = ${accountId} order by room`;
      const shown = states.map((row) => [row.room, row.state === "failed" ? `failed: ${row.reason}` : row.state]);
      expect(shown).toEqual([
        ["cluster-0", "stopped"],
        ["cluster-1", "stopped"],
        ["cluster-after-0", "running"],
        ["cluster-after-1", "running"],
      ]);
      // The figure docs/scaling.md gives comes from this line.
      await expectNothingLost({ load, calls, nodes }, sql, accountId, receiver, {
        fault: "redis cluster primary killed",
        recoveredMs,
        promotedMs,
        fanOutMs,
        streamsStartMs,
      });
    } finally {
      await sql.end();
    }
    expect(recoveredMs).toBeLessThan(10_000);
    expect(nodes.map((node) => childPids(node.process.pid))).toEqual(before);
    expect(nodes.every((node) => node.process.exitCode === null)).toBe(true);
  } finally {
    receiver.stop();
  }
}, 90_000);
