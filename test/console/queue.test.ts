/**
 * The Streams page shows the queue of starts waiting for a recorder worker, each with its
 * place, and follows it live: a start of higher priority is placed first, and when units
 * free the first one starts and the next moves up. One worker with room for one plain stream.
 */
import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { overrideConfig } from "../../src/core/config";
import { stopStateSubscriber } from "../../src/modules/streaming/state";
import { type RecorderWorker, startRecorderWorker } from "../../workers/recorder";
import { commandDriver } from "../../workers/recorder/command";
import { call, newAccount } from "../helpers";
import { POLLED } from "../support/browser";
import { type ConsoleUnderTest, startConsole } from "../support/console";

setDefaultTimeout(60_000);
const FREED_WITHIN_MS = 15_000;

let ui: ConsoleUnderTest;
let worker: RecorderWorker;
let restoreConfig: () => void;
const operator = { name: `queue-${crypto.randomUUID().slice(0, 6)}`, password: "queue password" };

beforeAll(async () => {
  // A plain stream costs 30 units: the worker runs one, the others wait.
  restoreConfig = overrideConfig({ streaming: { workerUnits: 30 } });
  ui = await startConsole(operator);
  worker = await startRecorderWorker(commandDriver("echo ready; exec sleep 60"));
});

afterAll(async () => {
  await ui?.stop();
  await worker?.stop();
  await stopStateSubscriber();
  restoreConfig();
});

test("queued streams are listed with their places, which move up as the first starts", async () => {
  const account = await newAccount();
  const start = (room_name: string, priority = 0) =>
    call("POST", "/terraform/v1/hooks/srs/startRecording", {
      body: { room_name, priority },
      headers: { authorization: `Bearer ${account.apiKey}` },
    });
  const running = await start("main-stage");
  expect(running.status).toBe(200);
  const later = await start("side-room");
  const urgent = await start("keynote", 5);
  expect([later.status, urgent.status]).toEqual([202, 202]);
  const [laterName, urgentName] = [later.body.stream_name as string, urgent.body.stream_name as string];

  const { page } = await ui.sharedOperatorPage();
  await page.getByLabel("Account").selectOption(account.accountId);
  await page.getByRole("link", { name: "Streams" }).click();
  const queue = page.getByRole("region", { name: "Queue" });
  await queue.waitFor();
  const place = (name: string) => queue.locator(`[data-queue-position="${name}"]`);
  // The keynote, queued last at a higher priority, is first.
  expect(await place(urgentName).textContent()).toBe("1");
  expect(await place(laterName).textContent()).toBe("2");
  expect(await queue.getByRole("row").nth(1).textContent()).toContain(urgentName);

  // The running stream stops: the keynote starts, and the side room moves up, without a reload.
  expect(
    (
      await call("POST", "/terraform/v1/hooks/srs/stopRecording", {
        body: { room_name: "main-stage" },
        headers: { authorization: `Bearer ${account.apiKey}` },
      })
    ).status,
  ).toBe(200);
  // A queued start is offered again every half second (workers/recorder/jobs.ts), so the next
  // starts soon after the stop; the ceiling is for a machine whose cores another suite shares.
  await page.waitForFunction(
    (name) => document.querySelector(`[data-queue-position="${name}"]`)?.textContent === "1",
    laterName,
    { ...POLLED, timeout: FREED_WITHIN_MS },
  );
  expect(await place(urgentName).count()).toBe(0);
  await page.waitForFunction(
    (name) => document.querySelector(`[data-stream-state="${name}"]`)?.textContent === "running",
    urgentName,
    { ...POLLED, timeout: FREED_WITHIN_MS },
  );

  // Stopped from the page while it waits: out of the queue, stopped, never started.
  await queue.getByRole("button", { name: `Stop ${laterName}` }).click();
  await page.waitForFunction(
    (name) => document.querySelector(`[data-stream-state="${name}"]`)?.textContent === "stopped",
    laterName,
    POLLED,
  );
  await page.getByText("Queue: no stream waits for a recorder.").waitFor();
  expect(
    (
      await call("POST", "/terraform/v1/hooks/srs/stopRecording", {
        body: { room_name: "keynote" },
        headers: { authorization: `Bearer ${account.apiKey}` },
      })
    ).status,
  ).toBe(200);
});
