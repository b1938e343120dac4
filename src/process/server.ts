/**
 * One API process: the Elysia app on PORT (with reusePort in a
 * pool, so its processes share the port), and the metrics listener.
 */
import { createApp } from "./app";
import { config } from "../core/config";
import type { Running } from "../core/lifecycle";
import { log } from "../core/log";
import type { Server } from "bun";
import { renderMetrics, startMetricsPublisher, stopMetricsPublisher } from "../http/metrics";
import { listenForInvalidations, stopListeningForInvalidations } from "../modules/accounts/service";
import { LOCAL_SOCKET_FLAG, serveLocalSocket } from "../modules/admin/local";
import { stopLlhlsOrigin } from "../modules/streaming/llhls/origin";
import { stopViewerSweeps } from "../modules/streaming/llhls/viewers";
import { stopStateSubscriber } from "../modules/streaming/state";
import { drainConnections } from "../realtime/open-sockets";
import { type ProcessServices, Stoppers } from "./root";

const PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8";

/**
 * GET /metrics on METRICS_HOST:METRICS_PORT, loopback by default: the per-route counts are
 * for the operator's Prometheus, not for anyone who can reach the API. A port held by
 * something else refuses the start like any other listener's (src/process/port-guard.ts): a
 * Parley that silently went without its metrics would be found out only by its alerts.
 */
function listenForMetrics(): Server<undefined> | undefined {
  if (config.metrics.port === 0) return undefined;
  return Bun.serve({
    hostname: config.metrics.host,
    port: config.metrics.port,
    reusePort: true,
    async fetch(request) {
      if (new URL(request.url).pathname !== "/metrics")
        return new Response("only /metrics is served here\n", { status: 404 });
      return new Response(await renderMetrics(), { headers: { "content-type": PROMETHEUS_TEXT } });
    },
    error: (error) => {
      log.warn({ err: error.message }, "metrics could not be rendered");
      return new Response("metrics unavailable\n", { status: 503 });
    },
  });
}

/**
 * Starts the API on the process's services. What it starts is stopped in reverse: the listeners
 * first (open requests and sockets drain within SHUTDOWN_GRACE_MS), then what served them; each
 * closes without waiting on a Redis that is gone, so a Redis outage cannot hold up the exit.
 */
export async function startApiServer(services: ProcessServices): Promise<Running & { port: number }> {
  const stoppers = new Stoppers();
  try {
    return await startOn(services, stoppers);
  } catch (error) {
    // A listener that could not bind: what had started stops, so the port and the socket are free again.
    await stoppers.stop();
    throw error;
  }
}

async function startOn(services: ProcessServices, stoppers: Stoppers): Promise<Running & { port: number }> {
  // Started on first use by the requests they serve: stopped once no request is left.
  stoppers.push("LL-HLS origin", stopLlhlsOrigin);
  stoppers.push("stream-state subscriber", stopStateSubscriber);
  stoppers.push("LL-HLS viewer sweeps", stopViewerSweeps);
  listenForInvalidations();
  stoppers.push("account-key invalidations", stopListeningForInvalidations);
  startMetricsPublisher();
  stoppers.push("metrics publisher", stopMetricsPublisher);
  const app = createApp().listen({
    hostname: config.http.host,
    port: config.http.port,
    // A pool's API processes (--role=api) share the port; the one API of an embedded Parley
    // holds it alone, so not even a second Parley started in the same instant can join it.
    reusePort: process.argv.includes("--role=api"),
    // Bun would refuse a larger body with a bare 413 before any hook runs; the pipeline keeps
    // MAX_BODY_BYTES itself, answers in the error shape, and never reads past the limit.
    maxRequestBodySize: Number.MAX_SAFE_INTEGER,
  });
  const server = app.server!;
  stoppers.push("api listener", async () => {
    // No new connections; open sockets finish their push in flight and are told to reconnect.
    const drained = Promise.all([server.stop(false), drainConnections()]);
    const grace = new Promise<void>((resolve) => setTimeout(resolve, config.http.shutdownGraceMs).unref?.());
    await Promise.race([drained, grace]);
    await server.stop(true);
  });
  const metrics = listenForMetrics();
  stoppers.push("metrics listener", () => metrics?.stop(true));
  // One process binds DATA_DIR/parley.sock: the only API process on the embedded database,
  // else the first of the supervisor's (started with the flag, and restarted with it).
  const ownsSocket = services.alone || process.argv.includes(LOCAL_SOCKET_FLAG);
  const localSocket = ownsSocket ? await serveLocalSocket((request) => app.handle(request)) : undefined;
  stoppers.push("local socket", () => localSocket?.stop());
  log.info({ host: config.http.host, port: server.port }, "api listening");
  return { port: server.port ?? config.http.port, stop: () => stoppers.stop() };
}
