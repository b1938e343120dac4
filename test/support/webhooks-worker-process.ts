/** A webhooks worker in its own process, so a test can kill it with SIGKILL mid-delivery. */
import { startWebhooksWorker } from "../../src/modules/webhooks/worker";

const running = startWebhooksWorker({ concurrency: 4, sweepIntervalMs: 200 });
await running.ready;
console.log("ready");
