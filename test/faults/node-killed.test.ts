/**
 * One of two Parley nodes (each a full `npm start`) killed with SIGKILL, every process of it,
 * behind nginx running the configuration docs/scaling.md shows, under mixed load: chat over
 * sockets on both nodes, event_sync through the load balancer, a webhook receiver that
 * verifies, streams on both nodes' recorders, a SIP call on each node's gateway.
 * Sockets on the dead node reconnect through nginx to the other and miss no stored message
 * (the join's history); its streams end `failed`, reason `recorder_lost`, with their webhook
 * (they cannot be resumed elsewhere: see docs/scaling.md); its call is ended `gateway_lost`;
 * every acknowledged event is stored, folded and delivered once; nothing else is disturbed.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { hostname } from "node:os";
import { eq } from "drizzle-orm";
import type { Socket } from "phoenix";
import postgres from "postgres";
import { db } from "../../src/db/client";
import { mapperIdFor } from "../../src/modules/mapper/service";
import { streams } from "../../src/modules/streaming/schema";
import { sipCalls } from "../../sip-gateway/schema";
import { newAccount } from "../helpers";
import { type LoadNode, mixedLoadEnv, prepareLoad, request, startLoad } from "../support/mixed-load";
import { type NginxLb, startNginxLb } from "../support/nginx-lb";
import { killNodes, type Parley, recordersOf, startParley } from "../support/parley";
import { connect, disconnect, join } from "../support/phoenix";
import { runSipp } from "../support/sipp";
import { childPids, until } from "../support/wait";

const LOST_MS = { recorder: 3_000, gateway: 3_000 };
let lb: NginxLb;
const nodes: Parley[] = [];
let apiKey: string;
let accountId: string;
const streamNames: string[] = [];

beforeAll(async () => {
  const shared = {
    ...mixedLoadEnv("nodekill"),
    // The periods after which a silent recorder worker and a silent gateway count as lost, a
    // third and a half of their defaults (10 s, 6 s): the wait for the dead node's streams and
    // call to end is theirs, and the surviving call still outlives it.
    STREAMING_RECORDER_LOST_MS: String(LOST_MS.recorder),
    SIP_GATEWAY_LOST_MS: String(LOST_MS.gateway),
  };
  nodes.push(
    ...(await Promise.all([
      startParley({ embedded: false, env: shared }),
      startParley({ embedded: false, env: shared }),
    ])),
  );
  lb = await startNginxLb(nodes.map((node) => node.port));
  ({ apiKey, accountId } = await newAccount());
}, 90_000);

afterAll(async () => {
  await killNodes(nodes, streamNames);
  await lb?.stop();
});

/** A socket that only listens to a room: on close it reconnects through the load balancer and rejoins. */
function listener(first: LoadNode, token: string, room: string) {
  const heard = new Set<string>();
  const rejoinedAt: number[] = [];
  let current: Socket | undefined;
  let closing = false;
  const open = async (node: LoadNode): Promise<void> => {
    const deadline = Date.now() + 20_000;
    while (!closing) {
      if (Date.now() > deadline) throw new Error(`the listener of ${room} could not join within 20 s`);
      const socket = connect(node.ws, token);
      const channel = socket.channel(`chat:${room}`, {});
      channel.on("archived_message", (message: { content: string }) => void heard.add(message.content));
      channel.on("new_message", (message: { content: string }) => void heard.add(message.content));
      try {
        await join(channel);
        current = socket;
        socket.onClose(() => {
          if (closing || current !== socket) return;
          current = undefined;
          void disconnect(socket).catch(() => {});
          void open(lb).then(() => rejoinedAt.push(Date.now()));
        });
        return;
      } catch {
        await disconnect(socket).catch(() => {});
        await Bun.sleep(200);
      }
    }
  };
  return {
    heard,
    rejoinedAt,
    ready: open(first),
    async close() {
      closing = true;
      if (current) await disconnect(current).catch(() => {});
    },
  };
}

test("a node killed: sockets move and miss nothing, its streams and calls end and are told, nothing lost", async () => {
  const [doomed, survivor] = nodes as [Parley, Parley];
  // Each step's end, printed: a run that times out then shows where it waited.
  const began = Date.now();
  const reached = (step: string) =>
    console.log(`node-killed: ${step} at ${((Date.now() - began) / 1000).toFixed(1)} s`);
  const { token, receiver } = await prepareLoad([lb], apiKey, ["stream.failed", "call.ended"], nodes.length);
  const listeners = [listener(survivor, token, "load-0"), listener(doomed, token, "load-1")];
  try {
    await Promise.all(listeners.map((one) => one.ready));
    reached("listeners joined");
    // Streams through the load balancer until each node's recorder runs at least one.
    const recorderPod = (node: Parley) => `${hostname()}-recorder-${childPids(node.process.pid, "recorder")[0]}`;
    const pods = nodes.map(recorderPod);
    const podOf = async (name: string) =>
      (await db.select({ pod: streams.podName }).from(streams).where(eq(streams.streamName, name)))[0]?.pod;
    const placed = new Map<string, string>();
    for (let n = 0; n < 10 && !pods.every((pod) => [...placed.values()].includes(pod)); n++) {
      const started = await request(
        lb,
        "POST",
        "/terraform/v1/hooks/srs/startRecording",
        { room_name: `kill-${n}` },
        apiKey,
        15_000,
      );
      expect(started.status).toBe(200);
      streamNames.push(started.body.stream_name);
      placed.set(started.body.stream_name, (await podOf(started.body.stream_name))!);
    }
    expect(pods.every((pod) => [...placed.values()].includes(pod))).toBe(true);
    reached(`${placed.size} streams placed`);
    const doomedStreams = [...placed].filter(([, pod]) => pod === pods[0]).map(([name]) => name);
    const survivingStreams = [...placed].filter(([, pod]) => pod === pods[1]).map(([name]) => name);

    // A call on each node's gateway, held long enough to outlive the kill and the dead gateway's
    // detection (LOST_MS.gateway and a look). The dead node's sipp retransmits its BYE into the
    // void until its timeout, which is all its run has left to say: it ends a second after its hold.
    const mapperId = await mapperIdFor(accountId, "kill@conference.example.com");
    const calls = nodes.map((node) =>
      runSipp({
        scenario: "call.xml",
        port: node.sipPort,
        service: "gateway",
        keys: { extra_header: `Parley-Conference-Room: ${mapperId}` },
        holdMs: 8_000,
        timeoutSeconds: node === doomed ? 9 : 15,
      }),
    );
    const gatewayName = (node: Parley) => `${hostname()}-sip-${childPids(node.process.pid, "sip")[0]}`;
    const gateways = nodes.map(gatewayName);
    const answered = await until(
      () => db.select().from(sipCalls).where(eq(sipCalls.accountId, accountId)),
      (rows) => gateways.every((gateway) => rows.some((row) => row.gateway === gateway && row.answeredAt !== null)),
      15_000,
      200,
    );
    expect(answered.map((row) => row.gateway).sort()).toEqual([...gateways].sort());
    reached("calls answered");

    // Chat: each sender starts on its own node and reconnects through nginx.
    const joinedOnce = new Set<number>();
    const firstOnOwnNode = (n: number): LoadNode => {
      if (joinedOnce.has(n)) return lb;
      joinedOnce.add(n);
      return nodes[n]!;
    };
    const load = startLoad(nodes as LoadNode[], apiKey, token, {
      nodeFor: firstOnOwnNode,
      eventNodes: [lb],
      chatPauseMs: 100,
    });
    await until(
      () => load.chatAcknowledged.length + load.eventsAcknowledged.length,
      (n) => n >= 30,
      15_000,
      100,
    );

    // The node dies as its machine would: every process at once, its recorders' too.
    const doomedPids = [doomed.process.pid, ...childPids(doomed.process.pid)];
    for (const pid of doomedPids) process.kill(pid, "SIGKILL");
    for (const name of doomedStreams) for (const pid of recordersOf(name)) process.kill(-pid, "SIGKILL");
    const killedAt = Date.now();
    reached("node killed");

    // The sockets that were on the dead node (node 0's sender, room 1's listener) rejoin through nginx.
    const socketsBack = await until(
      () => load.rejoins.length + listeners[1]!.rejoinedAt.length,
      (n) => n >= 2,
      15_000,
      50,
    );
    expect(socketsBack).toBeGreaterThanOrEqual(2);
    reached("sockets back");
    const socketsBackMs = Math.max(...[...load.rejoins, ...listeners[1]!.rejoinedAt]) - killedAt;

    const sql = postgres(process.env.DATABASE_URL!, { max: 1, onnotice: () => {} });
    try {
      const states = () => sql<{ stream_name: string; state: string; reason: string | null }[]>`
        select stream_name, state, reason from streams where account_id = ${accountId}`;
      const callRows = () => db.select().from(sipCalls).where(eq(sipCalls.accountId, accountId));
      // Both watched at once, each timed from the kill.
      const [[ended, streamsEndedMs], [lostCall, callEndedMs]] = await Promise.all([
        until(
          states,
          (rows) =>
            doomedStreams.every((name) => rows.some((row) => row.stream_name === name && row.state === "failed")),
          40_000,
          250,
        ).then((rows) => [rows, Date.now() - killedAt] as const),
        until(
          callRows,
          (rows) => rows.some((row) => row.gateway === gateways[0] && row.endedAt !== null),
          40_000,
          250,
        ).then((rows) => [rows, Date.now() - killedAt] as const),
      ]);
      for (const name of doomedStreams)
        expect(ended.find((row) => row.stream_name === name)).toMatchObject({
          state: "failed",
          reason: "recorder_lost",
        });
      for (const name of survivingStreams) expect(ended.find((row) => row.stream_name === name)?.state).toBe("running");
      expect(lostCall.find((row) => row.gateway === gateways[0])).toMatchObject({ reason: "gateway_lost" });
      reached("streams and call ended");

      const moreAfter = load.chatAcknowledged.length + load.eventsAcknowledged.length + 20;
      await until(
        () => load.chatAcknowledged.length + load.eventsAcknowledged.length,
        (n) => n >= moreAfter,
        15_000,
        100,
      );
      await load.stop();
      reached("load stopped");

      // The surviving call was untouched: sipp hung up when it planned to, and the record says so.
      const kept = await calls[1]!;
      expect(kept.code).toBe(0);
      const keptRow = await until(
        callRows,
        (rows) => rows.some((row) => row.gateway === gateways[1] && row.endedAt !== null),
        15_000,
        250,
      );
      expect(keptRow.find((row) => row.gateway === gateways[1])!.reason).not.toBe("gateway_lost");
      await calls[0];
      reached("calls done");

      // History on rejoin: each listener heard every acknowledged message of its room, live or in the join's history.
      for (const [n, one] of listeners.entries()) {
        const room = load.chatAcknowledged.filter((content) => content.startsWith(`n${n}-`));
        expect(room.filter((content) => !one.heard.has(content))).toEqual([]);
      }

      // Each stream's failure and each call's end told once, verified.
      const told = (type: string) => receiver.unique().filter((entry) => entry.verified && entry.event.type === type);
      const failures = await until(
        () => told("stream.failed"),
        (list) => list.length >= doomedStreams.length,
        15_000,
        250,
      );
      expect(failures.map((entry) => entry.event.data.stream_name).sort()).toEqual([...doomedStreams].sort());
      expect(failures.every((entry) => entry.event.data.reason === "recorder_lost")).toBe(true);
      const callEnds = await until(
        () => told("call.ended"),
        (list) => list.length >= 2,
        15_000,
        250,
      );
      expect(
        callEnds.map((entry) => entry.event.data.reason).filter((reason) => reason === "gateway_lost"),
      ).toHaveLength(1);
      expect(callEnds).toHaveLength(2);

      reached("told");
      const tally = await load.tally(sql, accountId, receiver);
      console.log(
        JSON.stringify({
          fault: "one of two nodes killed",
          socketsBackMs,
          streamsEndedMs,
          callEndedMs,
          streamsEnded: doomedStreams.length,
          streamsKept: survivingStreams.length,
          ...tally,
        }),
      );
      expect(tally.lostItems).toEqual([]);
      expect(tally.lost).toBe(0);
      expect(tally.detail.events!.duplicated + tally.detail.webhooks!.duplicated).toBe(0);
      expect(tally.acknowledged).toBeGreaterThan(50);
    } finally {
      await sql.end();
    }
    // The survivor's processes all still run.
    expect(survivor.process.exitCode).toBeNull();
  } finally {
    for (const one of listeners) await one.close();
    receiver.stop();
  }
}, 120_000);
