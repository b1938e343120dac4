/** Periodic background work of a worker role (sweeps, purges): one run at a time, stoppable. */
import { log } from "./log";

/**
 * Runs `task` every `intervalMs` after the previous run ended, until the returned stop is
 * called; stop waits for a run in progress. A failed run (the database is down) is logged and
 * the next one tries again: what is due waits in the database.
 */
export function every(intervalMs: number, what: string, task: () => Promise<void>): () => Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let running: Promise<void> = Promise.resolve();
  let stopped = false;
  const schedule = () => {
    if (stopped) return;
    timer = setTimeout(() => {
      running = task()
        .catch((error: Error) => log.warn({ err: error.message }, `${what} failed`))
        .finally(schedule);
    }, intervalMs);
  };
  schedule();
  return async () => {
    stopped = true;
    clearTimeout(timer);
    await running;
  };
}
