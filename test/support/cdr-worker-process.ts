/** A cdr worker in its own process, so a test can kill it with SIGKILL mid-job. */
import { startCdrWorker } from "../../workers/cdr";

const running = startCdrWorker({ concurrency: 1, lockDurationMs: 1_000, stalledIntervalMs: 500 });
await running.worker.waitUntilReady();
console.log("ready");
