/** One API process: the Elysia app on PORT with reusePort, so several processes share the port. */
import { createApp } from "./app";
import { config } from "./config";
import { log } from "./http/log";
import { startMetricsPublisher, stopMetricsPublisher } from "./http/metrics";
import { listenForInvalidations, stopListeningForInvalidations } from "./modules/accounts/service";
import { closeBroker } from "./realtime/broker";

export interface Running {
  stop(): Promise<void>;
}

export async function startApiServer(): Promise<Running & { port: number }> {
  listenForInvalidations();
  const app = createApp().listen({
    hostname: config.http.host,
    port: config.http.port,
    reusePort: true,
    // Bun refuses larger bodies outright; the pipeline answers a declared oversize with the error shape first.
    maxRequestBodySize: config.http.maxBodyBytes,
  });
  startMetricsPublisher();
  const server = app.server!;
  log.info({ port: server.port }, "api listening");
  return {
    port: server.port ?? config.http.port,
    async stop() {
      const drained = server.stop(false);
      const grace = new Promise<void>((resolve) => setTimeout(resolve, config.http.shutdownGraceMs).unref?.());
      await Promise.race([drained, grace]);
      await server.stop(true);
      stopMetricsPublisher();
      await closeBroker();
      await stopListeningForInvalidations();
    },
  };
}
