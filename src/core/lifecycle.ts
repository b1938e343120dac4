/**
 * How a Parley process role lives and stops: what a started role hands back (`Running`), and
 * the signal, stray-error and orphan handling every process that runs a role shares.
 */
import { config } from "./config";
import { dependencyFailure } from "./errors";
import { log } from "./log";

/** A started role (the API server, a worker, the SIP gateway): stopping it drains its work. */
export interface Running {
  stop(): Promise<void>;
}

const ORPHAN_CHECK_MS = 1_000;
/** Beyond the grace period, what stopping may take before the process gives up and exits anyway. */
export const STOP_MARGIN_MS = 5_000;

/** Run first when a stop signal arrives, before anything else of the stop (e.g. failing what waits on a lost Redis). */
const stoppingHooks: Array<() => void> = [];

export function whenStopping(hook: () => void): void {
  stoppingHooks.push(hook);
}

/** Run once a stop has drained everything, before the process exits: for what the roles needed until the end. */
const stoppedHooks: Array<() => Promise<void>> = [];

export function whenStopped(hook: () => Promise<void>): void {
  stoppedHooks.push(hook);
}

/**
 * Runs `stop` on the first SIGTERM or SIGINT, then exits. A stop that hangs (a job waiting on a
 * database that never answers) must not keep the process up forever: after `limitMs` it exits 1.
 */
export function onStopSignal(stop: () => Promise<void>, limitMs = config.http.shutdownGraceMs + STOP_MARGIN_MS): void {
  let stopping = false;
  const handler = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, "stopping");
    for (const hook of stoppingHooks) hook();
    setTimeout(() => {
      log.error({ limitMs }, "stop did not finish in time; exiting with work unfinished");
      process.exit(1);
    }, limitMs).unref();
    stop()
      .then(() => Promise.all(stoppedHooks.map((hook) => hook())))
      .then(
        // 0 unless the process set another code before stopping itself (a supervisor whose role could not listen).
        () => process.exit(process.exitCode ?? 0),
        (error: Error) => {
          log.error({ err: error.message }, "stop failed");
          process.exit(1);
        },
      );
  };
  process.on("SIGTERM", handler);
  process.on("SIGINT", handler);
}

/**
 * An error no caller caught (thrown from a timer or an event handler, or a promise nobody
 * awaited). A dependency outage is no reason to die: the operation concerned failed, its
 * work is retried from the database or the queue, and the clients reconnect. Anything else
 * is a bug of unknown reach, so the process exits and its supervisor starts a fresh one.
 */
export function guardAgainstStrayErrors(): void {
  const onStray = (kind: string) => (error: unknown) => {
    const failure = dependencyFailure(error);
    if (failure) {
      log.warn({ err: failure }, `${kind} while a dependency is down; carrying on`);
      return;
    }
    const err = error instanceof Error ? { message: error.message, stack: error.stack } : { message: String(error) };
    log.fatal({ err }, `${kind}; exiting`);
    process.exit(1);
  };
  process.on("uncaughtException", onStray("uncaught exception"));
  process.on("unhandledRejection", onStray("unhandled rejection"));
}

/**
 * Keeps a started process (its role and what the role stands on) until SIGTERM or SIGINT, or
 * until its supervisor (parentPid) is gone, then stops it.
 */
export function runUntilStopped(running: Running, parentPid?: number): void {
  onStopSignal(() => running.stop());
  // A supervisor killed outright cannot forward SIGTERM; a child whose parent is gone stops itself.
  if (parentPid !== undefined) {
    setInterval(() => {
      if (process.ppid !== parentPid) process.kill(process.pid, "SIGTERM");
    }, ORPHAN_CHECK_MS).unref();
  }
}
