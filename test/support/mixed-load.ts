/**
 * Mixed load on several Parley nodes sharing one PostgreSQL and one Redis, for the fault tests
 * that kill a node, the Redis master or the PostgreSQL primary under it: chat over a socket on
 * each node (the `phoenix` client), event_sync deliveries spread over the nodes, and a webhook
 * endpoint whose receiver verifies every delivery with `standardwebhooks`. Each client keeps
 * what was acknowledged; `tally` compares that with what the database holds and the receiver got.
 */
import { expect } from "bun:test";
import type { Socket } from "phoenix";
import type postgres from "postgres";
import { occupantJoined } from "./event-sync";
import { runSipp, type SippRun } from "./sipp";
import { connect, disconnect, join, push } from "./phoenix";
import { until } from "./wait";
import { type Received, startReceiver } from "./webhook-receiver";

/**
 * The settings every node of a mixed-load run shares: its own Redis key prefix, sockets of
 * several nodes meeting through Redis, streams on the `command` recorder (nothing to encode),
 * and sweeps quick enough to pick up within a run what a fault left behind.
 */
export function mixedLoadEnv(name: string): Record<string, string> {
  return {
    REDIS_PREFIX: `parley-test-${name}-${crypto.randomUUID()}`,
    REALTIME_BROKER: "redis",
    LOG_LEVEL: "warn",
    STREAMING_RECORDER_DRIVER: "command",
    STREAMING_RECORDER_COMMAND: "echo ready; exec sleep 120",
    STREAMING_OPERATION_TIMEOUT_MS: "10000",
    WEBHOOK_SWEEP_INTERVAL_MS: "1000",
    USAGE_SWEEP_INTERVAL_MS: "1000",
    USAGE_SWEEP_MIN_AGE_MS: "1000",
  };
}

export interface LoadNode {
  base: string;
  ws: string;
}

/** One request, bounded in time; a refused or silent node shows as status 0. */
export async function request(
  node: LoadNode,
  method: string,
  path: string,
  body: unknown,
  auth: string,
  timeoutMs = 5_000,
): Promise<{ status: number; body: any; retryAfter: string | null }> {
  try {
    const response = await fetch(`${node.base}${path}`, {
      method,
      headers: { authorization: auth, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await response.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {}
    return { status: response.status, body: parsed, retryAfter: response.headers.get("retry-after") };
  } catch {
    return { status: 0, body: undefined, retryAfter: null };
  }
}

export interface Tally {
  acknowledged: number;
  lost: number;
  duplicated: number;
  /** Per kind, for the printed summary. */
  detail: Record<string, { acknowledged: number; lost: number; duplicated: number; [more: string]: number }>;
  lostItems: string[];
}

/** Answers seen by the load while it ran, so a test can check what clients were told during a fault. */
export interface Seen {
  at: number;
  what: string;
  status: number | string;
  retryAfter?: string | null;
}

/**
 * A messaging token, a chat room per node (`load-<n>`) and a webhook endpoint; `eventTypes`: what
 * else the endpoint takes beside participant.joined (which `tally` counts).
 */
export async function prepareLoad(nodes: LoadNode[], apiKey: string, eventTypes: string[] = [], rooms = nodes.length) {
  const first = nodes[0]!;
  const created = await request(
    first,
    "POST",
    "/api/v1/misc/generate-token",
    { apiKey, user: { id: "loader", name: "Loader" }, scope: "messaging" },
    "",
  );
  if (created.status !== 200) throw new Error(`token: ${created.status} ${JSON.stringify(created.body)}`);
  const token = created.body.token as string;
  for (let n = 0; n < rooms; n++) {
    const room = await request(
      first,
      "POST",
      "/api/v1/messaging/rooms/create",
      { channel_id: `load-${n}` },
      `Bearer ${token}`,
    );
    if (room.status !== 201) throw new Error(`room: ${room.status} ${JSON.stringify(room.body)}`);
  }
  let secret = "";
  const receiver = await startReceiver(() => secret);
  const endpoint = await request(
    first,
    "POST",
    "/api/v1/webhooks",
    { url: receiver.url, event_types: ["participant.joined", ...eventTypes] },
    `Bearer ${apiKey}`,
  );
  if (endpoint.status !== 201) throw new Error(`webhook endpoint: ${endpoint.status} ${JSON.stringify(endpoint.body)}`);
  secret = endpoint.body.secret;
  return { token, receiver };
}

/**
 * Starts the load. Chat: each node's socket sends numbered messages one after another; an
 * error reply (dependency_down) is answered by sending the same message again, a push with no
 * reply (the node or its database gone) leaves that message's fate unknown and moves on.
 * `nodeFor` may point a socket elsewhere after its node died (the client reconnects there and
 * rejoins). Events: occupant joins posted round-robin over the nodes, each retried (it is
 * idempotent) until a 2xx acknowledges it.
 */
export function startLoad(
  nodes: LoadNode[],
  apiKey: string,
  token: string,
  options: { nodeFor?: (n: number) => LoadNode; eventNodes?: LoadNode[]; chatPauseMs?: number } = {},
) {
  const nodeFor = options.nodeFor ?? ((n: number) => nodes[n]!);
  const eventNodes = options.eventNodes ?? nodes;
  let running = true;
  const seen: Seen[] = [];
  const chatAcknowledged: string[] = [];
  const chatUnknown: string[] = [];
  const eventsAcknowledged: string[] = [];
  const sockets = new Set<Socket>();
  /** Messages the socket was told of while joined (archived on each join, then pushed live). */
  const heard = new Map<number, Set<string>>();
  /** When a socket whose connection closed was joined again (to the node `nodeFor` gave). */
  const rejoins: number[] = [];

  async function joined(n: number) {
    for (;;) {
      const node = nodeFor(n);
      const socket = connect(node.ws, token);
      sockets.add(socket);
      const channel = socket.channel(`chat:load-${n}`, {});
      const into = heard.get(n) ?? new Set<string>();
      heard.set(n, into);
      channel.on("archived_message", (message: { content: string }) => void into.add(message.content));
      channel.on("new_message", (message: { content: string }) => void into.add(message.content));
      // A socket whose node died closes: the push waiting for its reply is given up at once, not after its timeout.
      const closed = new Promise<undefined>((resolve) => socket.onClose(() => resolve(undefined)));
      try {
        await join(channel);
        return { socket, channel, closed };
      } catch {
        sockets.delete(socket);
        await disconnect(socket).catch(() => {});
        if (!running) return undefined;
        await Bun.sleep(200);
      }
    }
  }

  const chat = nodes.map(async (_, n) => {
    let link = await joined(n);
    for (let i = 0; running && link; i++) {
      const content = `n${n}-m${i}`;
      while (running && link) {
        const reply = await Promise.race([
          push(link.channel, "new_message", { content }).catch(() => undefined),
          link.closed,
        ]);
        seen.push({ at: Date.now(), what: `chat ${n}`, status: reply?.status ?? "no reply" });
        if (reply?.status === "ok") {
          chatAcknowledged.push(content);
          break;
        }
        if (reply === undefined || !link.socket.isConnected()) {
          chatUnknown.push(content);
          if (!link.socket.isConnected()) {
            sockets.delete(link.socket);
            await disconnect(link.socket).catch(() => {});
            link = await joined(n);
            if (link) rejoins.push(Date.now());
          }
          break;
        }
        await Bun.sleep(200);
      }
      await Bun.sleep(options.chatPauseMs ?? 30);
    }
  });

  const t0 = 1_900_000_000;
  const events = (async () => {
    for (let i = 0; running; i++) {
      const jid = `p${i}@meet.example.com/load`;
      const delivery = occupantJoined(
        `load-room-${i % 5}`,
        { id: `p${i}`, name: `P ${i}`, occupant_jid: jid },
        t0 + i,
        1,
      );
      for (let attempt = 0; running; attempt++) {
        const node = eventNodes[(i + attempt) % eventNodes.length]!;
        const answer = await request(node, "POST", delivery.path, delivery.body, `Bearer ${apiKey}`);
        seen.push({ at: Date.now(), what: "event", status: answer.status, retryAfter: answer.retryAfter });
        if (answer.status >= 200 && answer.status < 300) {
          eventsAcknowledged.push(`p${i}`);
          break;
        }
        await Bun.sleep(200);
      }
      await Bun.sleep(30);
    }
  })();

  return {
    seen,
    rejoins,
    heard,
    chatAcknowledged,
    eventsAcknowledged,
    async stop() {
      running = false;
      await Promise.all([...chat, events]);
      for (const socket of sockets) await disconnect(socket).catch(() => {});
    },
    /**
     * Compares with the database (`sql` on Parley's database) and the receiver: every
     * acknowledged message stored, every acknowledged event stored, folded and delivered once.
     */
    async tally(
      sql: postgres.Sql,
      accountId: string,
      receiver: Awaited<ReturnType<typeof startReceiver>>,
      withinMs = 30_000,
    ): Promise<Tally> {
      const lostItems: string[] = [];
      const stored = await sql<{ content: string }[]>`
        select m.content from chat_messages m join chat_rooms r on r.id = m.room_id
        where r.account_id = ${accountId} and r.channel_id like 'load-%'`;
      const chatCounts = countOf(stored.map((row) => row.content));
      const chatLost = chatAcknowledged.filter((content) => !chatCounts.has(content));
      lostItems.push(...chatLost.map((content) => `chat ${content}`));

      const eventRows = await sql<{ id: string }[]>`
        select payload->'occupant'->>'id' as id from conference_events where account_id = ${accountId} and kind = 'occupant_joined'`;
      const eventCounts = countOf(eventRows.map((row) => row.id));
      const eventsLost = eventsAcknowledged.filter((id) => !eventCounts.has(id));
      lostItems.push(...eventsLost.map((id) => `event ${id}`));
      const unfolded = await until(
        async () =>
          Number(
            (
              await sql<
                { n: string }[]
              >`select count(*) as n from conference_events_unfolded where account_id = ${accountId}`
            )[0]!.n,
          ),
        (n) => n === 0,
        withinMs,
        250,
      );
      if (unfolded > 0) lostItems.push(`${unfolded} events never folded`);

      const joins = (entries: Received[]) =>
        entries.filter((entry) => entry.verified && entry.event.type === "participant.joined");
      const deliveredIds = () => joins(receiver.received).map((entry) => entry.event.data.participant.id as string);
      await until(deliveredIds, (ids) => eventsAcknowledged.every((id) => ids.includes(id)), withinMs, 250);
      // A receiver keeps each webhook-id once (a repeat of one is how at-least-once shows): the
      // same event under two ids would be a true duplicate, the same id twice a redelivery.
      const webhookCounts = countOf(joins(receiver.unique()).map((entry) => entry.event.data.participant.id as string));
      const webhooksLost = eventsAcknowledged.filter((id) => !webhookCounts.has(id));
      lostItems.push(...webhooksLost.map((id) => `webhook ${id}`));
      const unverified = receiver.received.filter((entry) => !entry.verified).length;
      if (unverified > 0) lostItems.push(`${unverified} webhooks failed verification`);

      const duplicates = (counts: Map<string, number>) => [...counts.values()].reduce((sum, n) => sum + n - 1, 0);
      const detail = {
        chat: {
          acknowledged: chatAcknowledged.length,
          lost: chatLost.length,
          duplicated: duplicates(chatCounts),
          unknownOutcome: chatUnknown.length,
        },
        events: {
          acknowledged: eventsAcknowledged.length,
          lost: eventsLost.length + unfolded,
          duplicated: duplicates(eventCounts),
        },
        webhooks: {
          acknowledged: eventsAcknowledged.length,
          lost: webhooksLost.length + unverified,
          duplicated: duplicates(webhookCounts),
          redelivered: receiver.received.length - receiver.unique().length,
        },
      };
      const sum = (key: "acknowledged" | "lost" | "duplicated") =>
        Object.values(detail).reduce((total, kind) => total + kind[key], 0);
      return { acknowledged: sum("acknowledged"), lost: sum("lost"), duplicated: sum("duplicated"), detail, lostItems };
    },
  };
}

/**
 * A live stream of the room `<prefix>-<n>` started on each node before the fault, each name
 * added to `names` as it starts (for killNodes). Given 15 s, not the load's 5: with two suites
 * on the machine a start took longer than that.
 */
export async function startStreams(nodes: LoadNode[], apiKey: string, prefix: string, names: string[]): Promise<void> {
  for (const [n, node] of nodes.entries()) {
    const started = await request(
      node,
      "POST",
      "/terraform/v1/hooks/srs/startRecording",
      { room_name: `${prefix}-${n}` },
      apiKey,
      15_000,
    );
    expect(started.status).toBe(200);
    names.push(started.body.stream_name);
  }
}

/**
 * A SIP call (sipp) on each node's gateway, into one room, held `holdMs` so it outlives the
 * fault. `check` waits for sipp and the records: each call ran its whole course (sipp hung up
 * as planned), was recorded ended and not lost, and its call.ended webhook arrived once.
 */
export async function startCalls(nodes: Array<LoadNode & { sipPort: number }>, apiKey: string, holdMs: number) {
  const mapping = await request(
    nodes[0]!,
    "GET",
    "/api/v1/conference-mapper/conferenceMapper?conference=load-call@conference.meet.example.com",
    undefined,
    apiKey,
  );
  if (mapping.status !== 200) throw new Error(`conference mapper: ${mapping.status} ${JSON.stringify(mapping.body)}`);
  const runs = nodes.map((node) =>
    runSipp({
      scenario: "call.xml",
      port: node.sipPort,
      service: "gateway",
      keys: { extra_header: `Parley-Conference-Room: ${mapping.body.id}` },
      holdMs,
      timeoutSeconds: Math.ceil(holdMs / 1000) + 15,
    }),
  );
  return {
    /** Until both calls are answered and recorded so (bounded); the count answered. */
    async answered(sql: postgres.Sql, accountId: string): Promise<number> {
      const count = async () =>
        Number(
          (
            await sql<
              { n: string }[]
            >`select count(*) as n from sip_calls where account_id = ${accountId} and answered_at is not null`
          )[0]!.n,
        );
      return until(count, (n) => n >= nodes.length, 15_000, 100);
    },
    async check(sql: postgres.Sql, accountId: string, receiver: Awaited<ReturnType<typeof startReceiver>>) {
      const done: SippRun[] = await Promise.all(runs);
      const failed = done
        .filter((run) => run.code !== 0)
        .map((run) => `sipp exited ${run.code}: ${run.errors || run.output.slice(-500)}`);
      const callIds = done.map((run) => run.callId);
      const records = await until(
        () => sql<{ call_id: string; reason: string | null; answered: boolean; ended: boolean }[]>`
          select call_id, reason, answered_at is not null as answered, ended_at is not null as ended
          from sip_calls where account_id = ${accountId} and call_id = any(${callIds})`,
        (rows) => rows.length === callIds.length && rows.every((row) => row.ended),
        15_000,
        250,
      );
      const told = await until(
        () =>
          receiver
            .unique()
            .filter(
              (entry) =>
                entry.verified && entry.event.type === "call.ended" && callIds.includes(entry.event.data.call_id),
            ),
        (list) => list.length >= callIds.length,
        15_000,
        250,
      );
      return {
        failed,
        records: records.map(({ call_id, ...rest }) => rest),
        told: told.length,
        redelivered: receiver.received.filter((entry) => entry.event.type === "call.ended").length - told.length,
      };
    },
  };
}

/**
 * The verdict of a failover run with the load and the calls: what was counted, printed with the
 * run's own figures (`report`), and nothing acknowledged lost or told twice; both calls ran
 * their whole course, recorded and told once each.
 */
export async function expectNothingLost(
  run: { load: ReturnType<typeof startLoad>; calls: Awaited<ReturnType<typeof startCalls>>; nodes: unknown[] },
  sql: postgres.Sql,
  accountId: string,
  receiver: Awaited<ReturnType<typeof startReceiver>>,
  report: Record<string, unknown>,
) {
  const tally = await run.load.tally(sql, accountId, receiver);
  const phone = await run.calls.check(sql, accountId, receiver);
  console.log(JSON.stringify({ ...report, ...tally, calls: phone }));
  expect(tally.lostItems).toEqual([]);
  expect(phone).toMatchObject({ failed: [], told: 2, redelivered: 0 });
  expect(phone.records).toEqual(run.nodes.map(() => ({ reason: "caller_bye", answered: true, ended: true })));
  expect(tally.lost).toBe(0);
  expect(tally.detail.events!.duplicated + tally.detail.webhooks!.duplicated).toBe(0);
  expect(tally.acknowledged).toBeGreaterThan(40);
}

function countOf(items: string[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const item of items) counts.set(item, (counts.get(item) ?? 0) + 1);
  return counts;
}

/** Until the load has had at least `count` chat messages and events acknowledged (bounded): it flows. */
export function loadFlowing(load: ReturnType<typeof startLoad>, count = 20): Promise<number> {
  return until(
    () => load.chatAcknowledged.length + load.eventsAcknowledged.length,
    (n) => n >= count,
    15_000,
    100,
  );
}
