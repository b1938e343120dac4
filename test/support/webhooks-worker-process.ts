/** A webhooks worker in its own process, so a test can kill it with SIGKILL mid-delivery. */
import { buildProcess } from "../../src/process/root";
import { startWebhooksWorker } from "../../src/modules/webhooks/worker";

// Built as the webhooks role's process is (src/process/root.ts).
await buildProcess("webhooks");

const running = startWebhooksWorker({ concurrency: 4, sweepIntervalMs: 200 });
await running.ready;
console.log("ready");
