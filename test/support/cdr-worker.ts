/** Runs the real cdr worker until no event is left unfolded. */
import { startCdrWorker } from "../../workers/cdr";
import { unfoldedCount } from "./stored-events";

export async function foldQueued(timeoutMs = 20_000): Promise<void> {
  // Rings of events stored before the worker started were heard by nobody: its sweep folds them.
  const running = startCdrWorker({ concurrency: 4, sweepIntervalMs: 100, sweepMinAgeMs: 0 });
  const deadline = Date.now() + timeoutMs;
  try {
    for (;;) {
      const left = await unfoldedCount();
      if (left === 0) return;
      if (Date.now() > deadline) throw new Error(`cdr worker did not fold every event: ${left} left`);
      await Bun.sleep(50);
    }
  } finally {
    await running.stop();
  }
}
