/**
 * A stream its own worker is stopping stays that worker's until its row is finished: a
 * reconciliation that runs meanwhile (the recording uploading, the database slow on a busy
 * machine) must not take it for the stream of a lost recorder and finish it failed.
 */
import { expect, test } from "bun:test";
import { randomUUID } from "node:crypto";
import { eq } from "drizzle-orm";
import { db } from "../../src/db/client";
import { streams } from "../../src/modules/streaming/schema";
import type { RecorderProcess } from "../../workers/recorder/driver";
import { reconcile } from "../../workers/recorder/jobs";
import { stopLocal } from "../../workers/recorder/local";
import { newAccount } from "../helpers";
import { recorderHost } from "../support/recorder-host";
import { insertStoppingStream } from "../support/streams";
import { until } from "../support/wait";

test("a reconciliation during its own worker's stop leaves the stream stopped, not recorder_lost", async () => {
  const { accountId } = await newAccount();
  const pod = `stopping-pod-${randomUUID().slice(0, 8)}`;
  const row = await insertStoppingStream(accountId, pod, pod);
  const worker = recorderHost("stopping-pod", { pod });
  const recorder: RecorderProcess = {
    pid: 0,
    ready: Promise.resolve(),
    exited: new Promise(() => {}),
    stop: async () => ({ code: 0, signal: null, detail: "stopped" }),
  };
  // The last step before the row is finished, held open: the window a slow machine stretches.
  let finishing = false;
  let release = () => {};
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  const llhls = {
    finish: () => {
      finishing = true;
      return held;
    },
  };
  const entry = { stream: row, recorder, ingests: [], llhls };
  worker.local.set(row.id, entry);

  const stopping = stopLocal(worker, entry, "stopped", "requested");
  await until(
    async () => finishing,
    (reached) => reached,
    5_000,
    10,
  );
  await reconcile(worker, { othersJudgeable: () => true, stop: async () => {} });
  release();
  await stopping;

  const [after] = await db.select().from(streams).where(eq(streams.id, row.id));
  expect({ state: after?.state, reason: after?.reason }).toEqual({ state: "stopped", reason: "requested" });
  expect(worker.local.size).toBe(0);
});
