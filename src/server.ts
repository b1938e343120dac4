/** One API process: the Elysia app on PORT with reusePort, so several processes share the port. */
import { createApp } from "./app";
import { config } from "./config";
import type { Running } from "./core/lifecycle";
import { log } from "./core/log";
import { startMetricsPublisher, stopMetricsPublisher } from "./http/metrics";
import { listenForInvalidations, stopListeningForInvalidations } from "./modules/accounts/service";
import { stopLlhlsOrigin } from "./modules/streaming/llhls/origin";
import { stopViewerSweeps } from "./modules/streaming/llhls/viewers";
import { stopStateSubscriber } from "./modules/streaming/state";
import { closeBroker } from "./realtime/broker";
import { drainConnections } from "./realtime/socket";

export async function startApiServer(): Promise<Running & { port: number }> {
  listenForInvalidations();
  const app = createApp().listen({
    hostname: config.http.host,
    port: config.http.port,
    reusePort: true,
    // Bun would refuse a larger body with a bare 413 before any hook runs; the pipeline keeps
    // MAX_BODY_BYTES itself, answers in the error shape, and never reads past the limit.
    maxRequestBodySize: Number.MAX_SAFE_INTEGER,
  });
  startMetricsPublisher();
  const server = app.server!;
  log.info({ port: server.port }, "api listening");
  return {
    port: server.port ?? config.http.port,
    async stop() {
      // No new connections; open sockets finish their push in flight and are told to reconnect.
      const drained = Promise.all([server.stop(false), drainConnections()]);
      const grace = new Promise<void>((resolve) => setTimeout(resolve, config.http.shutdownGraceMs).unref?.());
      await Promise.race([drained, grace]);
      await server.stop(true);
      stopMetricsPublisher();
      // Each closes without waiting on a Redis that is gone, so a Redis outage cannot hold up the exit.
      stopViewerSweeps();
      await Promise.all([closeBroker(), stopListeningForInvalidations(), stopStateSubscriber(), stopLlhlsOrigin()]);
    },
  };
}
