/**
 * Recordings of what Jitsi's Prosody plugins send Parley and what Parley answers: a proxy in
 * front of Parley, on loopback, that passes each request on unchanged and keeps the
 * exchange. The live tests use it when JITSI_RECORD_TRAFFIC names a folder
 * (test/support/prosody.ts); test/jitsi/traffic-replay.test.ts replays the recordings.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export interface RecordedExchange {
  /** Milliseconds since the first exchange of the recording. */
  at: number;
  request: {
    method: string;
    /** Path and query, as sent. */
    path: string;
    /** As sent, but for Host and Content-Length; the API key is written PARLEY_API_KEY. */
    headers: Record<string, string>;
    /** The body as sent, and read: form fields or JSON. */
    body: string;
    form?: Record<string, string>;
    json?: unknown;
  };
  response: { status: number; contentType: string | null; json?: unknown; text?: string };
}

export interface Recording {
  /** What the Prosody loaded: e.g. `reservations-cjson+event_sync`, `token-auth`. */
  plugins: string;
  prosody: string;
  /** When the first exchange began; each exchange's `at` counts from here. */
  startedAt: string;
  exchanges: RecordedExchange[];
}

export interface TrafficRecorder {
  url: string;
  stop(apiKey: string): Promise<void>;
}

function prosodyVersion(): string {
  const version = Bun.spawnSync(["dpkg-query", "--showformat=$" + "{Version}", "--show", "prosody"], {
    stdout: "pipe",
  });
  return version.exitCode === 0 ? `Debian prosody ${version.stdout.toString()}` : "unknown";
}

const read = (contentType: string | null, body: string) => {
  if (body === "") return {};
  if (contentType?.includes("json")) {
    try {
      return { json: JSON.parse(body) };
    } catch {
      return {};
    }
  }
  if (contentType?.includes("x-www-form-urlencoded")) return { form: Object.fromEntries(new URLSearchParams(body)) };
  return {};
};

export async function recordTraffic(parleyUrl: string, plugins: string): Promise<TrafficRecorder> {
  const exchanges: RecordedExchange[] = [];
  let first: number | undefined;
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(request) {
      first ??= Date.now();
      const at = Date.now() - first;
      const url = new URL(request.url);
      const body = await request.text();
      const headers = Object.fromEntries(
        [...request.headers].filter(([name]) => name !== "host" && name !== "content-length"),
      );
      const answer = await fetch(`${parleyUrl}${url.pathname}${url.search}`, {
        method: request.method,
        headers,
        body: request.method === "GET" || request.method === "HEAD" ? undefined : body,
      });
      const text = await answer.text();
      const contentType = answer.headers.get("content-type");
      const response = contentType?.includes("json")
        ? { status: answer.status, contentType, ...read(contentType, text) }
        : { status: answer.status, contentType, text };
      exchanges.push({
        at,
        request: {
          method: request.method,
          path: `${url.pathname}${url.search}`,
          headers,
          body,
          ...read(request.headers.get("content-type"), body),
        },
        response,
      });
      // The body is passed on decoded, so no encoding or length of the original applies.
      const passed = [...answer.headers].filter(
        ([name]) => !["content-encoding", "content-length", "transfer-encoding"].includes(name),
      );
      return new Response(text, { status: answer.status, headers: passed });
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}`,
    async stop(apiKey) {
      server.stop(true);
      if (exchanges.length === 0) return;
      const recording: Recording = {
        plugins,
        prosody: prosodyVersion(),
        startedAt: new Date(first!).toISOString(),
        exchanges,
      };
      const dir = process.env.JITSI_RECORD_TRAFFIC!;
      mkdirSync(dir, { recursive: true });
      writeFileSync(
        join(dir, `${plugins}.json`),
        `${JSON.stringify(recording, null, 2).replaceAll(apiKey, "PARLEY_API_KEY")}\n`,
      );
    },
  };
}
