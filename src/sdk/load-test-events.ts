/**
 * `parley load-test`'s events and webhooks parts: event_sync deliveries, a room's life at a
 * time, and the sink this process serves for the webhooks they cause, each timed from the
 * delivery that caused it. Together because the one part's timings start in the other.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Parley } from "./client.js";
import type { LoadTestOptions } from "./load-test-options.js";
import { message, paced, sleep, type Tally, timed } from "./load-test-tally.js";
import { verifyWebhook } from "./webhooks.js";

export interface WebhookSink {
  sent(key: string): void;
  /** The delivery that would have caused it failed: no webhook is owed. */
  forget(key: string): void;
  settle(): Promise<void>;
}

/** A sink served here, an endpoint pointed at it for the events part's types, removed at the end. */
export async function setUpWebhooks(
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
export async function runEvents(
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
