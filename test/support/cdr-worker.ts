/** Runs the real cdr worker until the queue has nothing left to do. */
import { startCdrWorker } from "../../workers/cdr";
import { getQueue, QUEUE_NAMES } from "../../src/queue/queues";

export async function foldQueued(timeoutMs = 20_000): Promise<void> {
  const running = startCdrWorker({ concurrency: 4 });
  const queue = getQueue(QUEUE_NAMES.cdr);
  const deadline = Date.now() + timeoutMs;
  try {
    for (;;) {
      const counts = await queue.getJobCounts("waiting", "active", "delayed", "prioritized", "failed");
      if (counts.failed! > 0) throw new Error(`${counts.failed} cdr job(s) failed: ${(await queue.getFailed())[0]?.failedReason}`);
      if (counts.waiting! + counts.active! + counts.delayed! + counts.prioritized! === 0) return;
      if (Date.now() > deadline) {
        const retrying = await queue.getDelayed();
        throw new Error(`cdr queue not drained: ${JSON.stringify(counts)} ${retrying.map((job) => job.failedReason).join("; ")}`);
      }
      await Bun.sleep(50);
    }
  } finally {
    await running.stop();
  }
}
