/**
 * A webhook receiver on loopback that verifies every request with the `standardwebhooks`
 * package, as an independent Standard Webhooks peer would, and can be switched off
 * (connections refused), to failing (500, for good or once) or to a given status while a test runs.
 */
import type { Server } from "bun";
import { Webhook } from "standardwebhooks";
import { freePort } from "./ports";

export interface Received {
  id: string;
  timestamp: number;
  body: string;
  event: any;
  verified: boolean;
  at: number;
}

export type ReceiverMode = "ok" | "down" | "error" | "error-once" | "gone" | "hang";

export async function startReceiver(secret: () => string) {
  const port = await freePort();
  const received: Received[] = [];
  let mode: ReceiverMode = "ok";
  let server: Server<unknown> | undefined;
  const hanging: Array<() => void> = [];

  const listen = () => {
    server = Bun.serve({
      port,
      hostname: "127.0.0.1",
      async fetch(request) {
        const body = await request.text();
        const headers = Object.fromEntries(request.headers);
        let verified = true;
        try {
          new Webhook(secret()).verify(body, headers);
        } catch {
          verified = false;
        }
        const entry = {
          id: headers["webhook-id"] ?? "",
          timestamp: Number(headers["webhook-timestamp"]),
          body,
          event: JSON.parse(body),
          verified,
          at: Date.now(),
        };
        if (mode === "error") return new Response("receiver broken", { status: 500 });
        if (mode === "error-once") {
          mode = "ok";
          return new Response("receiver broken", { status: 500 });
        }
        if (mode === "gone") return new Response("gone", { status: 410 });
        if (mode === "hang") {
          await new Promise<void>((resolve) => hanging.push(resolve));
          return new Response("late");
        }
        received.push(entry);
        return new Response("thanks");
      },
    });
  };
  listen();

  return {
    url: `http://127.0.0.1:${port}/hook`,
    received,
    /** Each webhook-id once, as a receiver that de-duplicates keeps them. */
    unique: () => [...new Map(received.map((entry) => [entry.id, entry])).values()],
    /** Requests held open in "hang" mode: attempts that have reached the receiver and wait for its answer. */
    hanging: () => hanging.length,
    setMode(next: ReceiverMode) {
      if (next === "down" && server) {
        server.stop(true);
        server = undefined;
      } else if (next !== "down" && !server) listen();
      mode = next;
      if (next !== "hang") for (const release of hanging.splice(0)) release();
    },
    stop() {
      for (const release of hanging.splice(0)) release();
      server?.stop(true);
    },
  };
}
