/**
 * `parley load-test`: a mixed load against any Parley, by its URL and an account's API key, from
 * wherever it runs. Each part runs at a fixed rate (an open loop: a slow answer does not slow
 * the load down), times every operation, and is judged against the objectives (docs/cli.md):
 *
 * - token: POST /api/v1/misc/generate-token;
 * - chat: senders push `new_message` on Phoenix sockets, receivers in the same room time each
 *   broadcast from its push;
 * - events: event_sync deliveries, a room's life (created, joined, left, destroyed) at a time;
 * - webhooks: the deliveries of those events to a sink this process serves, signatures verified,
 *   timed from the event_sync delivery that caused them;
 * - llhls: blocking LL-HLS viewers of a live stream named by --stream, or started by --start-stream.
 *
 * What it creates is named `loadtest-<id>`; the webhook endpoint is removed, the chat room
 * emptied and a stream it started stopped at the end.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Parley } from "./client.js";
import { ParleyError } from "./errors.js";
import { verifyWebhook } from "./webhooks.js";

export const PARTS = ["token", "chat", "events", "webhooks", "llhls"] as const;
export type PartName = (typeof PARTS)[number];

export const DEFAULT_RATES: Record<"token" | "chat" | "events", number> = { token: 20, chat: 10, events: 8 };

/**
 * Met unless stated otherwise: errors under 1 % everywhere, and each part's p99 under what a
 * user would notice (a webhook passes a queue and a worker, so it is given more).
 */
export const DEFAULT_OBJECTIVES = [
  "*.errors<1%",
  "token.p99<250ms",
  "chat.p99<250ms",
  "events.p99<500ms",
  "webhooks.p99<2000ms",
  "llhls.p99<250ms",
];

export interface LoadTestOptions {
  url: string;
  key: string;
  durationMs: number;
  rates: Record<"token" | "chat" | "events", number>;
  receivers: number;
  senders: number;
  viewers: number;
  /** A live stream's name, or its multivariant playlist's URL. */
  stream?: string;
  /** Start a low-latency stream for the run (a recorder and media server must serve the target). */
  startStream: boolean;
  /** The sink's address as the target reaches it; the sink then listens on all interfaces. */
  sinkUrl?: string;
  sinkPort: number;
  objectives: Objective[];
  /** Called once a second with the progress line, and with what could not be cleaned up. */
  progress?: (line: string) => void;
}

export interface Objective {
  text: string;
  part: PartName | "*";
  metric: "errors" | "p50" | "p95" | "p99";
  /** Percent for errors, milliseconds otherwise. */
  limit: number;
}

export interface PartResult {
  status: "ran" | "skipped" | "failed";
  reason?: string;
  operations: number;
  errors: number;
  /** Operations answered per second of the run. */
  throughput: number;
  p50_ms: number | null;
  p95_ms: number | null;
  p99_ms: number | null;
  /** The first error seen, to say what went wrong. */
  first_error?: string;
}

export interface LoadTestResult {
  id: string;
  url: string;
  duration_s: number;
  parts: Record<PartName, PartResult>;
  objectives: Array<{ objective: string; part: PartName; value: number | null; met: boolean }>;
  pass: boolean;
}

/** "60s", "2m", "500ms" or a number of seconds, in milliseconds. */
export function parseDuration(text: string): number | undefined {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(text.trim());
  if (!match) return undefined;
  const value = Number(match[1]) * (match[2] === "ms" ? 1 : match[2] === "m" ? 60_000 : 1_000);
  return value > 0 ? value : undefined;
}

/** `part.metric<value`: `token.p99<250ms`, `chat.p95<0.1s`, `*.errors<1%`. */
export function parseObjective(text: string): Objective | undefined {
  const match = /^(\*|[a-z]+)\.(errors|p50|p95|p99)<(\d+(?:\.\d+)?)(%|ms|s)?$/.exec(text.trim());
  if (!match) return undefined;
  const [, part, metric, value, unit] = match as unknown as [string, string, Objective["metric"], string, string?];
  if (part !== "*" && !PARTS.includes(part as PartName)) return undefined;
  if (metric === "errors" ? unit !== "%" && unit !== undefined : unit === "%") return undefined;
  return {
    text: text.trim(),
    part: part as Objective["part"],
    metric,
    limit: Number(value) * (unit === "s" ? 1000 : 1),
  };
}

/** The defaults, each replaced by a given objective on its metric for its part (or every part: `*`). */
export function withDefaults(given: Objective[]): Objective[] {
  const defaults = DEFAULT_OBJECTIVES.map((text) => parseObjective(text)!);
  const same = (fallback: Objective, chosen: Objective) =>
    fallback.metric === chosen.metric && (chosen.part === "*" || fallback.part === chosen.part);
  return [...defaults.filter((objective) => !given.some((other) => same(objective, other))), ...given];
}

class Tally {
  readonly samples: number[] = [];
  errors = 0;
  firstError: string | undefined;
  status: PartResult["status"] = "ran";
  reason: string | undefined;

  ok(startedAt: number): void {
    this.samples.push(performance.now() - startedAt);
  }

  fail(why: string): void {
    this.errors++;
    this.firstError ??= why;
  }

  skip(reason: string, status: "skipped" | "failed" = "skipped"): void {
    this.status = status;
    this.reason = reason;
  }

  result(seconds: number): PartResult {
    const sorted = [...this.samples].sort((a, b) => a - b);
    const at = (p: number) =>
      sorted.length === 0
        ? null
        : Math.round(sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]! * 1000) / 1000;
    return {
      status: this.status,
      ...(this.reason !== undefined && { reason: this.reason }),
      operations: sorted.length,
      errors: this.errors,
      throughput: Math.round((sorted.length / seconds) * 10) / 10,
      p50_ms: at(50),
      p95_ms: at(95),
      p99_ms: at(99),
      ...(this.firstError !== undefined && { first_error: this.firstError }),
    };
  }
}

const message = (error: unknown) => (error instanceof Error ? error.message : String(error));
const sleep = (ms: number) => new Promise<void>((done) => setTimeout(done, ms));

/** Starts `operation` `rate` times a second until `running()` is false; resolves once all have ended. */
async function paced(rate: number, running: () => boolean, operation: () => Promise<void>): Promise<void> {
  if (rate <= 0) return;
  const pending = new Set<Promise<void>>();
  const interval = 1000 / rate;
  let next = performance.now();
  while (running()) {
    const started = operation().catch(() => {});
    pending.add(started);
    void started.then(() => pending.delete(started));
    next += interval;
    await sleep(Math.max(0, next - performance.now()));
  }
  await Promise.all(pending);
}

/** An HTTP request timed by the tally: 2xx counts, anything else is an error. */
async function timed(tally: Tally, request: () => Promise<Response>): Promise<Response | undefined> {
  const startedAt = performance.now();
  try {
    const answer = await request();
    if (answer.ok) {
      tally.ok(startedAt);
      return answer;
    }
    tally.fail(`${answer.status} ${(await answer.text()).slice(0, 200)}`);
  } catch (error) {
    tally.fail(message(error));
  }
  return undefined;
}

export class LoadTestRefused extends Error {}

/** Runs the load; throws LoadTestRefused when the key is refused, ParleyError when Parley cannot be reached. */
export async function runLoadTest(options: LoadTestOptions): Promise<LoadTestResult> {
  const id = crypto.randomUUID().slice(0, 8);
  const base = options.url.replace(/\/+$/, "");
  const auth = { authorization: `Bearer ${options.key}`, "content-type": "application/json" };
  const parley = new Parley({ baseUrl: base, apiKey: options.key, retry: { retries: 0 } });
  // The key is tried once before any load: a refused key is the operator's mistake, not a result.
  try {
    await parley.generateToken({ user: { id: `loadtest-${id}` }, scope: "messaging", exp: "5m" });
  } catch (error) {
    if (error instanceof ParleyError && (error.status === 401 || error.status === 403))
      throw new LoadTestRefused(`the API key was refused: ${error.message}`);
    throw error;
  }
  const tallies = Object.fromEntries(PARTS.map((part) => [part, new Tally()])) as Record<PartName, Tally>;
  const cleanups: Array<() => Promise<void>> = [];
  let stopAt = Number.POSITIVE_INFINITY;
  const running = () => performance.now() < stopAt;
  const interrupt = () => {
    stopAt = performance.now();
  };
  process.once("SIGINT", interrupt);
  try {
    if (options.rates.token <= 0) tallies.token.skip("--rate token=0");
    // Setup first, so that every part starts its load at the same moment.
    const chat = await setUpChat(base, parley, id, options, tallies.chat, cleanups);
    const webhooks = await setUpWebhooks(parley, id, options, tallies.webhooks, cleanups);
    const llhls = await setUpLlhls(base, parley, id, options, tallies.llhls, cleanups);

    const started = performance.now();
    stopAt = Math.min(stopAt, started + options.durationMs);
    const ticker = setInterval(() => {
      const seconds = Math.round((performance.now() - started) / 1000);
      const parts = PARTS.map((part) => {
        const tally = tallies[part];
        return tally.status === "ran" ? `${part} ${tally.samples.length}/${tally.errors}e` : `${part} -`;
      });
      options.progress?.(`load-test ${seconds}s/${Math.round(options.durationMs / 1000)}s  ${parts.join("  ")}`);
    }, 1000);
    try {
      await Promise.all([
        tallies.token.status === "ran"
          ? paced(options.rates.token, running, async () => {
              await timed(tallies.token, () =>
                fetch(`${base}/api/v1/misc/generate-token`, {
                  method: "POST",
                  headers: auth,
                  body: JSON.stringify({ user: { id: `loadtest-${id}-token` }, scope: "messaging", exp: "5m" }),
                }),
              );
            })
          : undefined,
        chat?.run(running),
        runEvents(base, auth, id, options.rates.events, running, tallies.events, webhooks),
        llhls?.run(running),
      ]);
      // Broadcasts and webhooks still on their way are waited for (5 s at most), then counted as lost.
      await Promise.all([chat?.settle(), webhooks?.settle()]);
    } finally {
      clearInterval(ticker);
    }
    // Throughput is over the time the load was offered, not the wait for the last answers.
    const seconds = Math.max(0.001, (Math.min(stopAt, performance.now()) - started) / 1000);
    const parts = Object.fromEntries(PARTS.map((part) => [part, tallies[part].result(seconds)])) as Record<
      PartName,
      PartResult
    >;
    const judged = judge(parts, options.objectives);
    const pass = judged.every((entry) => entry.met) && PARTS.every((part) => parts[part].status !== "failed");
    return {
      id: `loadtest-${id}`,
      url: base,
      duration_s: Math.round(seconds * 10) / 10,
      parts,
      objectives: judged,
      pass,
    };
  } finally {
    process.off("SIGINT", interrupt);
    for (const cleanup of cleanups.reverse())
      await cleanup().catch((error: unknown) => options.progress?.(`load-test: could not clean up: ${message(error)}`));
  }
}

function judge(parts: Record<PartName, PartResult>, objectives: Objective[]): LoadTestResult["objectives"] {
  return objectives.flatMap((objective) =>
    (objective.part === "*" ? PARTS : [objective.part])
      .filter((part) => parts[part].status === "ran")
      .map((part) => {
        const result = parts[part];
        const attempts = result.operations + result.errors;
        const value =
          objective.metric === "errors"
            ? attempts === 0
              ? null
              : Math.round((result.errors / attempts) * 100_000) / 1000
            : result[`${objective.metric}_ms`];
        // Nothing measured is nothing met: a part that ran and answered nothing has failed.
        return { objective: objective.text, part, value, met: value !== null && value < objective.limit };
      }),
  );
}

/** Senders and receivers on the Phoenix client, in one room of their own. */
async function setUpChat(
  base: string,
  parley: Parley,
  id: string,
  options: LoadTestOptions,
  tally: Tally,
  cleanups: Array<() => Promise<void>>,
) {
  if (options.rates.chat <= 0) return tally.skip("--rate chat=0");
  if (typeof globalThis.WebSocket !== "function")
    return tally.skip("this runtime has no WebSocket: run it on Node.js 22 or later, or Bun");
  const { Socket } = await import("phoenix");
  const channelId = `loadtest-${id}`;
  const topic = `chat:${channelId}`;
  const endpoint = `${base.replace(/^http/, "ws")}/api/v1/messaging`;
  const sentAt = new Map<number, number>();
  let acknowledged = 0;
  let delivered = 0;
  const sockets: InstanceType<typeof Socket>[] = [];
  const join = async (name: string) => {
    const token = await parley.generateToken({ user: { id: `${channelId}-${name}`, name }, scope: "messaging" });
    const socket = new Socket(endpoint, { params: { token }, reconnectAfterMs: () => 3_600_000, timeout: 5_000 });
    sockets.push(socket);
    socket.connect();
    const channel = socket.channel(topic);
    await new Promise<void>((done, refuse) => {
      channel
        .join(5_000)
        .receive("ok", () => done())
        .receive("error", (answer: unknown) => refuse(new Error(`join refused: ${JSON.stringify(answer)}`)))
        .receive("timeout", () => refuse(new Error("join timed out")));
    });
    return { token, channel };
  };
  try {
    const ownerToken = await parley.generateToken({ user: { id: `${channelId}-owner` }, scope: "messaging" });
    const owner = parley.with({ token: ownerToken });
    await owner.chat.createRoom({ channel_id: channelId });
    cleanups.push(async () => {
      await owner.chat.deleteMessages(channelId, { is_empty: true });
    });
    cleanups.push(async () => {
      await Promise.all(sockets.map((socket) => new Promise<void>((done) => socket.disconnect(() => done()))));
    });
    const receivers = await Promise.all(Array.from({ length: options.receivers }, (_, n) => join(`receiver-${n}`)));
    for (const { channel } of receivers) {
      channel.on("new_message", (pushed: { content?: string }) => {
        const match = /^loadtest (\d+)$/.exec(pushed.content ?? "");
        const at = match ? sentAt.get(Number(match[1])) : undefined;
        if (at === undefined) return;
        delivered++;
        tally.ok(at);
      });
    }
    const senders = await Promise.all(Array.from({ length: options.senders }, (_, n) => join(`sender-${n}`)));
    let sequence = 0;
    return {
      run: (running: () => boolean) =>
        paced(options.rates.chat, running, async () => {
          const number = sequence++;
          const sender = senders[number % senders.length]!;
          sentAt.set(number, performance.now());
          await new Promise<void>((done) => {
            sender.channel
              .push("new_message", { content: `loadtest ${number}` }, 5_000)
              .receive("ok", () => {
                acknowledged++;
                done();
              })
              .receive("error", (answer: unknown) => {
                tally.fail(`new_message refused: ${JSON.stringify(answer)}`);
                done();
              })
              .receive("timeout", () => {
                tally.fail("new_message not answered within 5 s");
                done();
              });
          });
        }),
      async settle() {
        const expected = () => acknowledged * options.receivers;
        const deadline = performance.now() + 5_000;
        while (delivered < expected() && performance.now() < deadline) await sleep(50);
        const missing = expected() - delivered;
        if (missing > 0) {
          tally.errors += missing;
          tally.firstError ??= `${missing} broadcasts never reached their receiver`;
        }
      },
    };
  } catch (error) {
    return tally.skip(`could not set up: ${message(error)}`, "failed");
  }
}

interface WebhookSink {
  sent(key: string): void;
  /** The delivery that would have caused it failed: no webhook is owed. */
  forget(key: string): void;
  settle(): Promise<void>;
}

/** A sink served here, an endpoint pointed at it for the events part's types, removed at the end. */
async function setUpWebhooks(
  parley: Parley,
  id: string,
  options: LoadTestOptions,
  tally: Tally,
  cleanups: Array<() => Promise<void>>,
): Promise<WebhookSink | undefined> {
  if (options.rates.events <= 0) {
    tally.skip("nothing to deliver: --rate events=0");
    return undefined;
  }
  const sentAt = new Map<string, number>();
  let secret = "";
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      response.writeHead(204).end();
      const body = Buffer.concat(chunks).toString("utf8");
      let event: { type: string; data: { room?: string } };
      try {
        event = verifyWebhook(request.headers, body, secret) as typeof event;
      } catch (error) {
        tally.fail(`a delivery's signature did not verify: ${message(error)}`);
        return;
      }
      const key = `${event.type} ${event.data.room}`;
      const at = sentAt.get(key);
      if (at === undefined) return;
      sentAt.delete(key);
      tally.ok(at);
    });
  });
  const host = options.sinkUrl ? "0.0.0.0" : "127.0.0.1";
  await new Promise<void>((done) => server.listen(options.sinkPort, host, done));
  cleanups.push(() => new Promise<void>((done) => server.close(() => done())));
  const url = options.sinkUrl ?? `http://127.0.0.1:${(server.address() as AddressInfo).port}/loadtest-${id}`;
  try {
    const created = await parley.webhooks.create({
      url,
      event_types: ["room.started", "participant.joined", "participant.left"],
      description: `loadtest-${id}`,
    });
    secret = created.secret;
    cleanups.push(async () => {
      await parley.webhooks.remove(created.endpoint.id);
    });
  } catch (error) {
    // A private sink is refused unless the target allows private networks: say so, and go on.
    tally.skip(`Parley refused the endpoint ${url}: ${message(error)} (give --sink-url an address it accepts)`);
    return undefined;
  }
  return {
    sent: (key) => sentAt.set(key, performance.now()),
    forget: (key) => sentAt.delete(key),
    async settle() {
      const deadline = performance.now() + 5_000;
      while (sentAt.size > 0 && performance.now() < deadline) await sleep(50);
      if (sentAt.size > 0) {
        tally.errors += sentAt.size;
        tally.firstError ??= `${sentAt.size} events were not delivered within 5 s of the run's end`;
      }
    },
  };
}

/** event_sync deliveries as Jitsi's Prosody module sends them, a room's whole life at a time. */
async function runEvents(
  base: string,
  headers: Record<string, string>,
  id: string,
  rate: number,
  running: () => boolean,
  tally: Tally,
  sink: WebhookSink | undefined,
): Promise<void> {
  if (rate <= 0) return tally.skip("--rate events=0");
  const domain = "conference.loadtest.invalid";
  let rooms = 0;
  // Four deliveries per room life: its lives start at a quarter of the rate.
  await paced(rate / 4, running, async () => {
    const room = `loadtest-${id}-${rooms++}`;
    const now = Math.floor(Date.now() / 1000);
    const fields = { room_name: room, room_jid: `${room}@${domain}`, is_breakout: false };
    const occupant = { id: `${room}-user`, name: "load test", occupant_jid: `${room}@${domain}/user` };
    const deliveries: Array<[string, string | undefined, object]> = [
      ["room/created", "room.started", { event_name: "muc-room-created", ...fields, created_at: now }],
      [
        "occupant/joined",
        "participant.joined",
        {
          event_name: "muc-occupant-joined",
          ...fields,
          active_occupants_count: 1,
          occupant: { ...occupant, joined_at: now },
        },
      ],
      [
        "occupant/left",
        "participant.left",
        {
          event_name: "muc-occupant-left",
          ...fields,
          active_occupants_count: 0,
          occupant: { ...occupant, joined_at: now, left_at: now },
        },
      ],
      [
        "room/destroyed",
        undefined,
        {
          event_name: "muc-room-destroyed",
          ...fields,
          created_at: now,
          destroyed_at: now,
          all_occupants: [{ ...occupant, joined_at: now, left_at: now }],
        },
      ],
    ];
    for (const [path, type, body] of deliveries) {
      if (type) sink?.sent(`${type} ${room}`);
      const answer = await timed(tally, () =>
        fetch(`${base}/api/v1/events/${path}`, { method: "POST", headers, body: JSON.stringify(body) }),
      );
      if (!answer) {
        if (type) sink?.forget(`${type} ${room}`);
        return;
      }
      await answer.arrayBuffer();
    }
  });
}

/** The live stream's multivariant playlist: the one named, or one started for the run and stopped after it. */
async function liveStream(
  base: string,
  parley: Parley,
  id: string,
  options: LoadTestOptions,
  cleanups: Array<() => Promise<void>>,
): Promise<{ master: URL } | { skipped: string }> {
  if (options.stream) {
    const named = /^https?:\/\//.test(options.stream)
      ? options.stream
      : `${base}/llhls/v1/live/${encodeURIComponent(options.stream)}.m3u8`;
    return { master: new URL(named) };
  }
  if (!options.startStream)
    return { skipped: "no live stream: name one with --stream, or start one with --start-stream (docs/cli.md)" };
  const room = `loadtest-${id}`;
  let started: { low_latency_hls_url?: string };
  try {
    started = (await parley.streaming.start({ room_name: room, is_low_latency: true })) as typeof started;
  } catch (error) {
    return { skipped: `Parley did not start a stream: ${message(error)}` };
  }
  cleanups.push(async () => {
    await parley.streaming.stop(room);
  });
  if (!started.low_latency_hls_url) return { skipped: "the stream started has no low-latency playlist" };
  const master = new URL(started.low_latency_hls_url);
  // The recorder needs a few seconds to publish its first parts: the load waits for them.
  const deadline = performance.now() + 30_000;
  while (performance.now() < deadline) {
    const answer = await fetch(master).catch(() => undefined);
    if (answer?.ok) {
      const variant = (await answer.text()).split("\n").find((line) => line.includes(".m3u8"));
      const media = variant ? await fetch(new URL(variant, master)).catch(() => undefined) : undefined;
      if (media?.ok && (await media.text()).includes("#EXT-X-PRELOAD-HINT")) return { master };
    } else await answer?.arrayBuffer();
    await sleep(250);
  }
  return { skipped: `the stream ${room} did not go live within 30 s (a recorder and media server must be running)` };
}

/** Blocking-reload viewers: each asks for the next part as an LL-HLS player does, and fetches it. */
async function setUpLlhls(
  base: string,
  parley: Parley,
  id: string,
  options: LoadTestOptions,
  tally: Tally,
  cleanups: Array<() => Promise<void>>,
) {
  if (options.viewers <= 0) return tally.skip("--viewers 0");
  const stream = await liveStream(base, parley, id, options, cleanups);
  if ("skipped" in stream) return tally.skip(stream.skipped);
  const { master } = stream;
  const answer = await fetch(master).catch((error: unknown) => error as Error);
  if (answer instanceof Error || !answer.ok)
    return tally.skip(`${master} is not live (${answer instanceof Error ? answer.message : answer.status})`);
  const variant = (await answer.text()).split("\n").find((line) => line.trim() !== "" && !line.startsWith("#"));
  if (!variant) return tally.skip(`${master} lists no variant`, "failed");
  const media = new URL(variant.trim(), master);
  const viewer = async (running: () => boolean) => {
    // The playlist's own query (the viewer id it hands out) is kept beside the blocking reload's.
    let blocking: Record<string, string> = {};
    let waited: URL | undefined;
    while (running()) {
      const asked = new URL(media);
      for (const [name, value] of Object.entries(blocking)) asked.searchParams.set(name, value);
      const playlist = await fetch(asked).catch((error: unknown) => error as Error);
      if (playlist instanceof Error || !playlist.ok) {
        tally.fail(
          playlist instanceof Error
            ? playlist.message
            : `playlist ${playlist.status} ${(await playlist.text()).slice(0, 200)}`,
        );
        await sleep(1000);
        blocking = {};
        waited = undefined;
        continue;
      }
      const text = await playlist.text();
      // The reload was held until the hinted part existed: fetching it now times its delivery alone.
      if (waited) {
        const startedAt = performance.now();
        const part = await fetch(waited).catch((error: unknown) => error as Error);
        if (part instanceof Error || !part.ok) tally.fail(part instanceof Error ? part.message : `part ${part.status}`);
        else {
          await part.arrayBuffer();
          tally.ok(startedAt);
        }
      }
      const lines = text.split("\n");
      const sequence = Number(/^#EXT-X-MEDIA-SEQUENCE:(\d+)/m.exec(text)?.[1] ?? 0);
      const isUri = (line: string) => line.trim() !== "" && !line.startsWith("#");
      const lastSegment = lines.findLastIndex(isUri);
      const partsSince = lines.slice(lastSegment + 1).filter((line) => line.startsWith("#EXT-X-PART:")).length;
      const hint = /#EXT-X-PRELOAD-HINT:.*URI="([^"]+)"/.exec(text)?.[1];
      if (!hint) {
        tally.fail("the media playlist has no preload hint");
        await sleep(1000);
        blocking = {};
        waited = undefined;
        continue;
      }
      waited = new URL(hint, media);
      blocking = { _HLS_msn: String(sequence + lines.filter(isUri).length), _HLS_part: String(partsSince) };
    }
  };
  return {
    run: (running: () => boolean) => Promise.all(Array.from({ length: options.viewers }, () => viewer(running))),
  };
}
