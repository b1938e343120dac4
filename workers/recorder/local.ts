/** The recorders one worker runs, and how a stream of its own, or one whose recorder is lost, is finished. */
import { existsSync, readFileSync, unlinkSync } from "node:fs";
import { config } from "../../src/core/config";
import { log } from "../../src/core/log";
import type { PubSub } from "../../src/core/pubsub";
import { finishStream, getStream, LIVE_STATES, type Stream } from "../../src/modules/streaming";
import type { RecorderDriver, RecorderProcess } from "./driver";
import { type Ingest, unreachableIngest } from "./ingest";
import type { LowLatencyPackaging } from "./llhls";
import { recordingPathOf, uploadRecording } from "./recordings";

export interface LocalRecorder {
  stream: Stream;
  recorder: RecorderProcess;
  /** The media server addresses it publishes to, checked when it fails. */
  ingests: Ingest[];
  recordingPath?: string;
  /** LL-HLS packaging of a low-latency stream. */
  llhls?: LowLatencyPackaging;
  stopping?: Promise<void>;
  emptyTimer?: ReturnType<typeof setTimeout>;
}

/** One recorder worker: where it runs, and the streams it runs. */
export interface RecorderHost {
  pod: string;
  host: string;
  driver: RecorderDriver;
  /** The process's publish/subscribe: a stop for another worker's stream is relayed to it there. */
  pubsub: PubSub;
  local: Map<string, LocalRecorder>;
  /** Starts under way, counted against STREAMING_CAPACITY with the running streams. */
  reserved: number;
  /** Cost units (streaming/cost.ts) of the starts under way not yet among `local`. */
  reservedUnits: number;
  /** Called whenever a stream of this worker ends: its units may fit a queued stream now. */
  roomFreed(): void;
  /** Shutting down: recorders that exit now were stopped, not failed. */
  closing: boolean;
}

/** Stops a recorder of this worker, keeps its recording, and finishes its stream. */
export function stopLocal(
  worker: RecorderHost,
  entry: LocalRecorder,
  state: "stopped" | "failed",
  reason: string,
): Promise<void> {
  entry.stopping ??= (async () => {
    clearTimeout(entry.emptyTimer);
    await entry.recorder.stop(config.streaming.stopGraceMs);
    await finishHeld(worker, entry, () => keepAndFinish(entry, state, reason));
  })();
  return entry.stopping;
}

/**
 * Runs `finish` with the stream kept among this worker's streams until it is done, whatever
 * happens: reconciliation takes a live row of this pod that the worker no longer holds for a
 * recorder lost, and finished a stream being stopped (its recording uploading, the database
 * slow) or failing as failed `recorder_lost`, instead of with its own reason.
 */
async function finishHeld(worker: RecorderHost, entry: LocalRecorder, finish: () => Promise<void>): Promise<void> {
  try {
    await finish();
  } finally {
    worker.local.delete(entry.stream.id);
    worker.roomFreed();
  }
}

/**
 * A recorder that dies on its own fails its stream (it is not restarted; a new start makes a
 * new stream). One that dies before it ever published is checked against the media server.
 */
export function failOnExit(worker: RecorderHost, entry: LocalRecorder): void {
  let published = false;
  entry.recorder.ready.then(
    () => {
      published = true;
    },
    () => {},
  );
  entry.recorder.exited.then((exit) => {
    if (entry.stopping || worker.closing) return;
    entry.stopping = finishHeld(worker, entry, async () => {
      const unreachable = published ? undefined : await unreachableIngest(entry.ingests);
      await keepAndFinish(entry, "failed", unreachable ?? `recorder_exited: ${exit.detail}`);
    }).catch((error: Error) =>
      log.error({ stream: entry.stream.streamName, err: error.message }, "could not finish a failed stream"),
    );
  });
}

async function keepAndFinish(entry: LocalRecorder, state: "stopped" | "failed", reason: string): Promise<void> {
  await entry.llhls
    ?.finish()
    .catch((error: Error) =>
      log.warn({ stream: entry.stream.streamName, err: error.message }, "LL-HLS end not published"),
    );
  const current = await getStream(entry.stream.id);
  let key: string | undefined;
  if (entry.recordingPath) {
    // A stream given up before it ran (start timeout) has nothing worth keeping.
    if (current?.startedAt)
      key = await uploadRecording(entry.stream, entry.recordingPath).catch((error: Error) => {
        log.error({ stream: entry.stream.streamName, err: error.message }, "recording upload failed; kept on disk");
        return undefined;
      });
    else if (existsSync(entry.recordingPath)) unlinkSync(entry.recordingPath);
  }
  await finishStream(entry.stream.id, LIVE_STATES, state, reason, key);
  log.info({ stream: entry.stream.streamName, state, reason }, "stream finished");
}

/** True when `pid` still runs the recorder of this stream (not a recycled pid). */
function runsStream(pid: number, stream: Stream): boolean {
  try {
    const commandLine = readFileSync(`/proc/${pid}/cmdline`, "utf8");
    return (
      commandLine.includes(stream.streamName) ||
      readFileSync(`/proc/${pid}/environ`, "utf8").includes(stream.streamName)
    );
  } catch {
    return false;
  }
}

/** Finishes a stream whose recorder is gone, keeping whatever it recorded on this machine. */
export async function finishOrphan(
  worker: RecorderHost,
  stream: Stream,
  state: "stopped" | "failed",
  reason: string,
): Promise<void> {
  if (stream.host === worker.host && stream.pid && stream.pid > 0 && runsStream(stream.pid, stream)) {
    try {
      process.kill(-stream.pid, "SIGKILL");
    } catch {
      // Already gone.
    }
  }
  const path = recordingPathOf(stream);
  const key =
    stream.startedAt && stream.host === worker.host
      ? await uploadRecording(stream, path).catch(() => undefined)
      : undefined;
  await finishStream(stream.id, LIVE_STATES, state, reason, key);
  log.warn(
    { stream: stream.streamName, previousPod: stream.podName, state, reason },
    "stream finished for a lost recorder",
  );
}
