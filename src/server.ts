/** One API process: the Elysia app on PORT with reusePort, so several processes share the port. */
import { createApp } from "./app";
import { config } from "./config";
import type { Running } from "./core/lifecycle";
import { log } from "./core/log";
import { database } from "./db/client";
import { startMetricsPublisher, stopMetricsPublisher } from "./http/metrics";
import { listenForInvalidations, stopListeningForInvalidations } from "./modules/accounts/service";
import { LOCAL_SOCKET_FLAG, serveLocalSocket } from "./modules/admin/local";
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
  // One process binds DATA_DIR/parley.sock: the only API process on the embedded database,
  // else the first of the supervisor's (started with the flag, and restarted with it).
  const ownsSocket = database.kind === "pglite" || process.argv.includes(LOCAL_SOCKET_FLAG);
  const localSocket = ownsSocket ? await serveLocalSocket((request) => app.handle(request)) : undefined;
  const server = app.server!;
  log.info({ port: server.port }, "api listening");
  return {
    port: server.port ?? config.http.port,
    async stop() {
      // No new connections; open sockets finish their push in flight and are told to reconnect.
      const drained = Promise.all([server.stop(false), drainConnections()]);
      const grace = new Promise<void>((resolve) => setTimeout(resolve, config.http.shutdownGraceMs).unref?.());
      await Promise.race([drained, grace]);
      await Promise.all([server.stop(true), localSocket?.stop()]);
      stopMetricsPublisher();
      // Each closes without waiting on a Redis that is gone, so a Redis outage cannot hold up the exit.
      await Promise.all([closeBroker(), stopListeningForInvalidations(), stopStateSubscriber()]);
    },
  };
}
