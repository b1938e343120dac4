/** A cdr worker in its own process, so a test can kill it with SIGKILL mid-fold. */
import { startCdrWorker } from "../../workers/cdr";

const running = startCdrWorker({ concurrency: 1, sweepIntervalMs: 600_000 });
await running.ready;
console.log("ready");
