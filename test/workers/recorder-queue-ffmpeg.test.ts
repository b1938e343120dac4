/**
 * Recording admission with the real ffmpeg recorder on the embedded default (PGlite, every
 * role in one process): with units for one plain stream, a second start is queued (202) and
 * starts by itself, publishing to the media server, once the first stops.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { type NginxRtmp, startNginxRtmp } from "../support/nginx-rtmp";
import { type Parley, startParley } from "../support/parley";
import { until } from "../support/wait";

let nginx: NginxRtmp | undefined;
let parley: Parley | undefined;
let apiKey: string;

beforeAll(async () => {
  // The media server's application without callbacks: only the recorder publishes to it here.
  nginx = await startNginxRtmp("http://127.0.0.1:9", "unused");
  parley = await startParley({
    embedded: true,
    env: {
      BOOTSTRAP_ACCOUNT: "true",
      SIP_ENABLED: "false",
      LOG_LEVEL: "warn",
      STREAMING_RTMP_INGEST_URL: nginx.directUrl,
      STREAMING_X264_PRESET: "ultrafast",
      // A plain stream costs 30 units: room for one.
      STREAMING_WORKER_UNITS: "40",
    },
  });
  apiKey = await parley.firstApiKey();
}, 90_000);

afterAll(async () => {
  await parley?.close();
  await nginx?.stop();
});

const hook = async (name: "startRecording" | "stopRecording", room_name: string) => {
  const answer = await fetch(`${parley!.base}/terraform/v1/hooks/srs/${name}`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ room_name }),
  });
  return { status: answer.status, body: (await answer.json()) as Record<string, unknown> };
};

test("on PGlite with ffmpeg: the second stream waits in the queue and starts when the first stops", async () => {
  const first = await hook("startRecording", "first-stage");
  expect(first.status).toBe(200);
  const second = await hook("startRecording", "second-stage");
  expect(second.status).toBe(202);
  expect(second.body).toMatchObject({ started: false, queued: true, position: 1 });
  // Still waiting while the first runs: a start of its room answers the same 202.
  expect((await hook("startRecording", "second-stage")).status).toBe(202);

  expect((await hook("stopRecording", "first-stage")).status).toBe(200);
  const stopped = Date.now();
  // Running now: a start of its room answers 200 with the stream's addresses, the same stream.
  const running = await until(
    () => hook("startRecording", "second-stage"),
    (answer) => answer.status === 200,
    20_000,
    100,
  );
  const waited = Date.now() - stopped;
  console.log(`second ffmpeg stream running ${waited} ms after the first stopped`);
  expect(running.body).toMatchObject({ started: true, stream_name: second.body.stream_name });
  const metrics = await (await fetch(parley!.metrics)).text();
  expect(metrics).toContain('parley_recorder_queue_depth{priority="0"} 0\n');
  expect(metrics).toContain("parley_recorder_queue_wait_seconds_count 1\n");
  expect((await hook("stopRecording", "second-stage")).status).toBe(200);
}, 60_000);
