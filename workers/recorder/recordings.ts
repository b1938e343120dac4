/** A stream's MP4: written on the worker's disk while it runs, kept in the object store once it ends. */
import { createReadStream, existsSync, statSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import { config } from "../../src/core/config";
import { log } from "../../src/core/log";
import { recordingObjectKey, type Stream } from "../../src/modules/streaming";
import { objects } from "../../src/storage/objects";

export function recordingPathOf(stream: Stream): string {
  return join(config.streaming.recordingDir, `${stream.id}.mp4`);
}

/**
 * Uploads the stream's MP4 and deletes the local copy; answers
 * the object key, or undefined when there is nothing to keep.
 */
export async function uploadRecording(stream: Stream, path: string): Promise<string | undefined> {
  if (!existsSync(path)) return undefined;
  const size = statSync(path).size;
  if (size === 0) {
    unlinkSync(path);
    return undefined;
  }
  if (!objects.configured()) {
    log.warn({ stream: stream.streamName, path }, "recording kept on disk: object storage is not configured");
    return undefined;
  }
  const key = recordingObjectKey(stream);
  await objects.put(key, createReadStream(path), { contentLength: size, contentType: "video/mp4" });
  unlinkSync(path);
  log.info({ stream: stream.streamName, bytes: size }, "recording uploaded");
  return key;
}
