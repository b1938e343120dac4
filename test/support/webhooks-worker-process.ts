/** A webhooks worker in its own process, so a test can kill it with SIGKILL mid-delivery. */
import { startWebhooksWorker } from "../../workers/webhooks";

const running = startWebhooksWorker({ concurrency: 4, lockDurationMs: 1_000, stalledIntervalMs: 500, sweepIntervalMs: 200 });
await running.worker.waitUntilReady();
console.log("ready");
