/**
 * A low-latency stream on real parts for the LL-HLS tests: Parley listening on loopback (the
 * origin), a private nginx-rtmp (the recorder's RTMP ingest), and a recorder worker running
 * the ffmpeg driver with its test pattern.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApp } from "../../src/process/app";
import { overrideConfig } from "../../src/core/config";
import { stopLlhlsOrigin } from "../../src/modules/streaming/llhls/origin";
import { stopViewerSweeps } from "../../src/modules/streaming/llhls/viewers";
import { stopStateSubscriber } from "../../src/modules/streaming/state";
import { type RecorderWorker, startRecorderWorker } from "../../workers/recorder";
import type { RecorderDriver } from "../../workers/recorder/driver";
import { ffmpegDriver } from "../../workers/recorder/ffmpeg";
import { call, newAccount } from "../helpers";
import { type NginxRtmp, startNginxRtmp } from "./nginx-rtmp";

export interface LlhlsStack {
  base: string;
  apiKey: string;
  start(body: Record<string, unknown>): Promise<{ status: number; body: any }>;
  stop(room: string): Promise<{ status: number; body: any }>;
  close(): Promise<void>;
}

/** With `driver`, the recorder worker runs that driver instead of ffmpeg's. */
export async function startLlhlsStack(driver: RecorderDriver = ffmpegDriver): Promise<LlhlsStack> {
  const secret = "llhls-callback-secret";
  const api = createApp().listen({ hostname: "127.0.0.1", port: 0 });
  const base = `http://127.0.0.1:${api.server!.port}`;
  const nginx: NginxRtmp = await startNginxRtmp(base, secret);
  const restore = overrideConfig({
    streaming: {
      ...nginx.settings,
      llhlsBaseUrl: `${base}/llhls/v1/live`,
      vodBaseUrl: `${base}/vod/v1`,
      x264Preset: "ultrafast",
      callbackSecret: secret,
      callbackAddresses: ["127.0.0.1", "::ffff:127.0.0.1", "::1"],
      recordingDir: join(mkdtempSync(join(tmpdir(), "parley-llhls-")), "recordings"),
    },
  });
  const { apiKey } = await newAccount();
  const worker: RecorderWorker = await startRecorderWorker(driver);
  const headers = { authorization: apiKey };
  return {
    base,
    apiKey,
    start: (body) => call("POST", "/terraform/v1/hooks/srs/startRecording", { body, headers }),
    stop: (room_name) => call("POST", "/terraform/v1/hooks/srs/stopRecording", { body: { room_name }, headers }),
    async close() {
      await worker.stop();
      await nginx.stop();
      await api.stop(true);
      stopViewerSweeps();
      await Promise.all([stopStateSubscriber(), stopLlhlsOrigin()]);
      restore();
    },
  };
}
