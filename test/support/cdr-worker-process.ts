/** A cdr worker in its own process, so a test can kill it with SIGKILL mid-fold. */
import { buildProcess } from "../../src/process/root";
import { startCdrWorker } from "../../workers/cdr";

// Built as the cdr role's process is (src/process/root.ts).
await buildProcess("cdr");

const running = startCdrWorker({ concurrency: 1, sweepIntervalMs: 600_000 });
await running.ready;
console.log("ready");
