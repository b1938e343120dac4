/**
 * One slow receiver does not take the worker's slots from the others: ten endpoints on one
 * account, each sent every event. With one receiver accepting connections and never
 * answering and another answering 500, the eight healthy receivers see their deliveries
 * as soon as when all ten answer. Before each endpoint was held to its share of the slots,
 * the silent receiver's backlog took every slot for WEBHOOK_TIMEOUT_MS at a time, and the
 * healthy receivers' p99 was the timeout or more.
 */
import { expect, test } from "bun:test";
import { createServer, type Socket } from "node:net";
import { eq } from "drizzle-orm";
import { db } from "../../src/db/client";
import { recordEvent } from "../../src/modules/catalogue";
import { webhookEndpoints } from "../../src/modules/webhooks/schema";
import { startWebhooksWorker } from "../../src/modules/webhooks/worker";
import { call, newAccount } from "../helpers";
import { freePort } from "../support/ports";
import { until } from "../support/wait";
import { startReceiver } from "../support/webhook-receiver";

const EVENTS = 30;
const EVENT_EVERY_MS = 20;
/** How long the healthy receivers' deliveries may take in all; one not there by then counts as never. */
const CEILING_MS = 8_000;

/** A receiver that accepts TCP connections and never answers; `stop` drops them, so the attempts end. */
async function blackHole() {
  const sockets: Socket[] = [];
  const server = createServer((socket) => {
    sockets.push(socket);
    socket.on("error", () => {});
  });
  const port = await freePort();
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${port}/hook`,
    stop() {
      for (const socket of sockets) socket.destroy();
      server.close();
    },
  };
}

/** The p99 of the eight healthy receivers' delivery latencies (event written to received), two others faulty or not. */
async function healthyP99(faulty: boolean): Promise<number> {
  const account = await newAccount();
  const secrets: string[] = [];
  const healthy = await Promise.all(Array.from({ length: 8 }, (_, i) => startReceiver(() => secrets[i]!)));
  const failing = await startReceiver(() => secrets[9]!);
  if (faulty) failing.setMode("error");
  const silent = faulty ? await blackHole() : undefined;
  const extra = faulty ? undefined : await startReceiver(() => secrets[8]!);
  const others = [silent?.url ?? extra!.url, failing.url];
  const worker = startWebhooksWorker({ concurrency: 16, sweepIntervalMs: 200 });
  try {
    // The silent one first: its deliveries are claimed and queued ahead of the others'.
    for (const [i, url] of [...others, ...healthy.map((receiver) => receiver.url)].entries()) {
      const created = await call("POST", "/api/v1/webhooks", {
        headers: { authorization: `Bearer ${account.apiKey}` },
        body: { url },
      });
      expect(created.status).toBe(201);
      // Receivers 0-7 are the healthy ones, 8 and 9 the others.
      secrets[i < 2 ? 8 + i : i - 2] = created.body.secret as string;
    }
    await worker.ready;
    for (let i = 0; i < EVENTS; i++) {
      await db.transaction((tx) =>
        recordEvent(tx, account.accountId, "reservation.deleted", { reservation_id: i, room: `isolation-${i}` }),
      );
      await Bun.sleep(EVENT_EVERY_MS);
    }
    await until(
      () => healthy.reduce((sum, receiver) => sum + receiver.unique().length, 0),
      (n) => n >= 8 * EVENTS,
      CEILING_MS,
    );
    const latencies = healthy.flatMap((receiver) =>
      receiver.unique().map((entry) => entry.at - Date.parse(entry.event.created_at)),
    );
    while (latencies.length < 8 * EVENTS) latencies.push(Number.POSITIVE_INFINITY);
    latencies.sort((a, b) => a - b);
    return latencies[Math.ceil(latencies.length * 0.99) - 1]!;
  } finally {
    // The silent receiver's connections end first, so the worker need not wait out their attempts.
    silent?.stop();
    await worker.stop();
    // Their retries would take a share of the later tests' slots.
    await db.delete(webhookEndpoints).where(eq(webhookEndpoints.accountId, account.accountId));
    for (const receiver of [...healthy, failing, ...(extra ? [extra] : [])]) receiver.stop();
  }
}

test("a receiver that never answers and one answering 500 leave the others' p99 as with all ten healthy", async () => {
  const allHealthy = await healthyP99(false);
  const withFaults = await healthyP99(true);
  console.log(`healthy receivers' p99: ${allHealthy} ms with all ten healthy, ${withFaults} ms with two faulty`);
  // 10 % of a p99 of tens of milliseconds is less than one delay of a loaded machine, and the p99 of 30 events is
  // their slowest one's: on two shared cores one claim waits 100-200 ms now and then, in either run (the all-healthy
  // p99 was 19-154 ms from run to run). Hence 200 ms besides; what this catches is a wait of WEBHOOK_TIMEOUT_MS, and
  // before each endpoint was held to its share most healthy deliveries had not arrived after 8 s.
  expect(withFaults).toBeLessThanOrEqual(allHealthy * 1.1 + 200);
}, 40_000);
