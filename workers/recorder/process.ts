/**
 * Runs a recorder as the leader of its own process group, so stopping it reaches every
 * process it started, and pairs it with a watchdog: a tiny shell that checks twice a
 * second that this worker still lives and kills the group once it does not. That holds
 * however the worker dies (even SIGKILL), so a dead worker never leaves a recorder behind.
 * (A pipe closing on the worker's death would be quicker, but spawned children inherit
 * pipe ends, which keeps such a pipe open.)
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import type { Readable } from "node:stream";
import { log } from "../../src/core/log";
import type { RecorderExit, RecorderProcess } from "./driver";

/**
 * Cuts URLs in a line of recorder output down to scheme, host and port: stream keys travel
 * in the path (or the credentials), the address is what an operator needs to see.
 */
export function redactUrls(line: string): string {
  return line.replace(/([a-z][a-z0-9+.-]*:\/\/)(?:[^\s/@]*@)?([^\s/?#'"]*)[^\s'"]*/gi, "$1$2/…").slice(0, 300);
}

const groups = new Set<number>();

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // The group is already gone.
  }
}

// A worker that exits on purpose takes its recorders with it, without waiting for the watchdogs.
process.on("exit", () => {
  for (const pid of groups) killGroup(pid, "SIGKILL");
});

export interface GroupOptions {
  /** The stream it records, named in the log lines of its output. */
  stream: string;
  command: string;
  args: string[];
  env?: Record<string, string>;
  /** Each line the recorder writes on stdout. */
  onLine(line: string): void;
  /** Extra pipes from the recorder, as file descriptors 3, 4, ...: its media outputs. */
  mediaPipes?: number;
}

export function spawnGroup(
  options: GroupOptions,
): RecorderProcess & { readonly child: ChildProcess; markReady(): void } {
  const child = spawn(options.command, options.args, {
    detached: true,
    stdio: ["ignore", "pipe", "pipe", ...Array.from({ length: options.mediaPipes ?? 0 }, () => "pipe" as const)],
    env: { ...process.env, ...options.env },
  });
  const pid = child.pid ?? -1;
  if (pid > 0) groups.add(pid);
  const watchdog =
    pid > 0
      ? spawn(
          "sh",
          [
            "-c",
            'while kill -0 "$2" 2>/dev/null && kill -0 "$1" 2>/dev/null; ' +
              'do sleep 0.5; done; kill -KILL "-$1" 2>/dev/null',
            "parley-recorder-watchdog",
            String(pid),
            String(process.pid),
          ],
          { stdio: "ignore", detached: true },
        )
      : undefined;
  watchdog?.on("error", () => {});

  const lastErrors: string[] = [];
  createInterface({ input: child.stdout! }).on("line", options.onLine);
  createInterface({ input: child.stderr! }).on("line", (line) => {
    // The recorder's own words go to the log; the stream's reason says what to fix (./ingest.ts).
    log.warn({ stream: options.stream, output: redactUrls(line) }, "recorder said");
    lastErrors.push(redactUrls(line));
    if (lastErrors.length > 3) lastErrors.shift();
  });

  let markReady: () => void = () => {};
  let failReady: (error: Error) => void = () => {};
  const ready = new Promise<void>((resolve, reject) => {
    markReady = resolve;
    failReady = reject;
  });
  ready.catch(() => {});

  const exited = new Promise<RecorderExit>((resolve) => {
    const finish = (code: number | null, signal: string | null, spawnError?: Error) => {
      groups.delete(pid);
      // The recorder is gone: make sure nothing it started lingers, then retire the watchdog.
      if (pid > 0) killGroup(pid, "SIGKILL");
      watchdog?.kill("SIGKILL");
      const how = spawnError
        ? `could not start: ${spawnError.message}`
        : signal
          ? `killed by ${signal}`
          : `exited with code ${code}`;
      const detail = [how, ...lastErrors.slice(-1)].join(": ");
      failReady(new Error(detail));
      resolve({ code, signal, detail });
    };
    child.on("error", (error) => finish(null, null, error));
    child.on("exit", (code, signal) => finish(code, signal));
  });

  const media = options.mediaPipes ? (child.stdio.slice(3) as Readable[]) : undefined;
  return {
    child,
    pid,
    ready,
    exited,
    media,
    markReady: () => markReady(),
    async stop(graceMs: number) {
      killGroup(pid, "SIGTERM");
      const timer = setTimeout(() => killGroup(pid, "SIGKILL"), graceMs);
      const exit = await exited;
      clearTimeout(timer);
      return exit;
    },
  };
}
