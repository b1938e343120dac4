/**
 * The console's pages in a real browser against real PostgreSQL, Redis, the cdr worker and
 * a recorder worker (the command driver running a small shell recorder): accounts and keys,
 * usage from event_sync, streams changing live, axe-core and screenshots of every page.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import type { Page } from "playwright-core";
import { postMessage } from "../../src/modules/chat/posting";
import { createRoom } from "../../src/modules/chat/rooms";
import { createReservation } from "../../src/modules/scheduler/reservations";
import { stopStateSubscriber } from "../../src/modules/streaming/state";
import { type RecorderWorker, startRecorderWorker } from "../../workers/recorder";
import { commandDriver } from "../../workers/recorder/command";
import { call, newAccount } from "../helpers";
import { POLLED, screenshot, seriousViolations } from "../support/browser";
import { foldQueued } from "../support/cdr-worker";
import { type ConsoleUnderTest, startConsole } from "../support/console";
import { deliver, occupantJoined, occupantLeft, roomCreated, roomDestroyed } from "../support/event-sync";

// A browser test waits on pages, workers and Chromium; each test still bounds its own waits.
setDefaultTimeout(30_000);

// Says it publishes, then runs until stopped; a room named "crash-*" dies a moment after starting.
const RECORDER = `
echo ready
case "$PARLEY_ROOM" in crash-*) sleep 1; exit 3 ;; esac
exec sleep 60`;

let ui: ConsoleUnderTest;
let worker: RecorderWorker;
let base: string;
let account: Awaited<ReturnType<typeof newAccount>>;
const operator = { name: `pages-${crypto.randomUUID().slice(0, 6)}`, password: "pages password" };

beforeAll(async () => {
  ui = await startConsole(operator);
  base = ui.base;
  account = await newAccount();
  worker = await startRecorderWorker(commandDriver(RECORDER));
});

afterAll(async () => {
  await ui?.stop();
  await worker?.stop();
  await stopStateSubscriber();
});

// Every test here is the operator's: one signed-in page serves them all, loaded afresh for each.
const operatorPage = () => ui.sharedOperatorPage();

async function chooseAccount(page: Page, accountId: string) {
  await page.getByLabel("Account").selectOption(accountId);
}

describe("accounts and keys", () => {
  test("an operator creates an account and a key; the key works until revoked in the console", async () => {
    const { page } = await operatorPage();
    await page.getByRole("link", { name: "Accounts and keys" }).click();
    const name = `made-${crypto.randomUUID().slice(0, 6)}`;
    await page.getByLabel("New account name").fill(name);
    await page.getByRole("button", { name: "Create account" }).click();
    const firstKey = (await page.locator("[data-new-key]").textContent())!;
    expect(firstKey).toMatch(/^prl_/);
    const section = page.locator("section.account", { hasText: name });
    await section.waitFor();
    const accountId = (await section.getAttribute("data-account"))!;

    const tokenWith = (apiKey: string) =>
      fetch(`${base}/api/v1/misc/generate-token`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ apiKey, user: { id: "u1" } }),
      });
    expect((await tokenWith(firstKey)).status).toBe(200);

    await section.getByLabel("New key label").fill("ci");
    await section.getByRole("button", { name: "Create API key" }).click();
    await page.getByText(/^New key #\d+/).waitFor();
    const secondKey = (await page.locator("[data-new-key]").textContent())!;
    expect(secondKey).not.toBe(firstKey);
    expect((await tokenWith(secondKey)).status).toBe(200);
    const keyId = /#(\d+)/.exec((await page.getByText(/^New key #\d+/).textContent())!)![1];

    await page
      .locator(`section[data-account="${accountId}"]`)
      .getByRole("button", { name: `Revoke key #${keyId}` })
      .click();
    await page.getByText(`Revoking key #${keyId}: done.`).waitFor();
    const refused = await tokenWith(secondKey);
    expect(refused.status).toBe(401);
    expect((await refused.json()).error.code).toBe("invalid_api_key");
    expect((await tokenWith(firstKey)).status).toBe(200);
    // The secret is never listed again: only its prefix.
    expect(await page.locator("section.account", { hasText: name }).textContent()).not.toContain(secondKey);
  });
});

describe("usage", () => {
  test("participant minutes posted through event_sync appear in the usage chart's data", async () => {
    const now = Math.floor(Date.now() / 1000);
    // Inside one UTC day whatever the hour: 10 minutes ending a minute ago, or 10 minutes from midnight.
    const dayStart = now - (now % 86_400);
    const created = Math.max(dayStart, now - 3600);
    const ann = { name: "Ann", id: "ann", occupant_jid: "plan@conference.meet.example.com/ann" };
    const bob = { name: "Bob", id: "bob", occupant_jid: "plan@conference.meet.example.com/bob" };
    for (const delivery of [
      roomCreated("plan", created),
      occupantJoined("plan", ann, created + 60, 1),
      occupantJoined("plan", bob, created + 60, 2),
      occupantLeft("plan", ann, created + 60, created + 660, 1),
      occupantLeft("plan", bob, created + 60, created + 960, 0),
      roomDestroyed("plan", created, created + 1000, []),
    ]) {
      expect((await deliver(account.apiKey, delivery)).status).toBe(200);
    }
    await foldQueued();

    const { page } = await operatorPage();
    await chooseAccount(page, account.accountId);
    await page.getByRole("link", { name: "Usage" }).click();
    await page.getByRole("table", { name: "Usage per day and room" }).waitFor();
    // The chart is drawn by a script of its own once the page is there: on a busy machine, after the table.
    await page.waitForFunction(() => window.parleyCharts?.["usage-minutes"] !== undefined, undefined, POLLED);
    const chart = await page.evaluate(() => {
      const plot = window.parleyCharts["usage-minutes"]!;
      return {
        labels: plot.series.map((series) => series.label),
        data: plot.data.map((column) => Array.from(column as ArrayLike<number>)),
      };
    });
    expect(chart.labels.slice(1)).toEqual(["Participant", "Phone", "Streaming", "Recording"]);
    const today = new Date(created * 1000).toISOString().slice(0, 10);
    const index = chart.data[0]!.indexOf(Date.parse(`${today}T00:00:00Z`) / 1000);
    expect(index).toBeGreaterThanOrEqual(0);
    // Ann stayed 10 minutes and Bob 15.
    expect(chart.data[1]![index]).toBe(25);
    // The same figure as the usage report of the public API.
    const report = await call("POST", "/api/v1/pricing/cdr", {
      body: {},
      headers: { authorization: `Bearer ${account.apiKey}` },
    });
    expect(report.body.days.find((day: { room_name: string }) => day.room_name === "plan").participant_minutes).toBe(
      25,
    );

    const download = await page.evaluate(async () => {
      const link = document.querySelector<HTMLAnchorElement>("a[download]")!;
      const response = await fetch(link.href);
      return { type: response.headers.get("content-type"), text: await response.text() };
    });
    expect(download.type).toContain("text/csv");
    expect(download.text).toContain("plan");
  });
});

describe("streams", () => {
  test("a stream started through the API appears live and changes state without a reload", async () => {
    const { page } = await operatorPage();
    await chooseAccount(page, account.accountId);
    await page.getByRole("link", { name: "Streams" }).click();
    await page.getByRole("heading", { name: "Streams", level: 1 }).waitFor();
    // A reload would fire load again; moving between pages only changes the hash.
    let loads = 0;
    page.on("load", () => loads++);

    const auth = { authorization: `Bearer ${account.apiKey}` };
    const started = await call("POST", "/terraform/v1/hooks/srs/startRecording", {
      body: { room_name: "crash-demo" },
      headers: auth,
    });
    expect(started.status).toBe(200);
    const name = started.body.stream_name as string;
    const state = page.locator(`[data-stream-state="${name}"]`);
    const seenAt = Date.now();
    await state.waitFor();
    // The recorder dies a second after it started: the page follows, running then failed.
    await page.waitForFunction(
      (stream) => document.querySelector(`[data-stream-state="${stream}"]`)?.textContent === "failed",
      name,
      { ...POLLED, timeout: 8_000 },
    );
    expect(Date.now() - seenAt).toBeLessThan(8_000);
    await page.getByRole("cell", { name: /recorder_exited/ }).waitFor();

    // The overview lists it among recent failures, with its reason.
    await page.getByRole("link", { name: "Overview" }).click();
    await page.getByRole("table", { name: "Failures in the last 24 hours" }).getByText(name).waitFor();

    // A running stream: stopped from the page, its state changes in place.
    await page.getByRole("link", { name: "Streams" }).click();
    const running = await call("POST", "/terraform/v1/hooks/srs/startRecording", {
      body: { room_name: "weekly" },
      headers: auth,
    });
    expect(running.status).toBe(200);
    const runningName = running.body.stream_name as string;
    // The start answered once the stream was running: the page shows it within the 2 seconds the console promises.
    const answeredAt = Date.now();
    await page.waitForFunction(
      (stream) => document.querySelector(`[data-stream-state="${stream}"]`)?.textContent === "running",
      runningName,
      { ...POLLED, timeout: 5_000 },
    );
    expect(Date.now() - answeredAt).toBeLessThan(2_000);
    // Play loads hls.js (a file of its own) and asks for the stream's playlist from the media server.
    const playlist = page.waitForRequest((request) => request.url().endsWith(`/${runningName}.m3u8`));
    await page.getByRole("button", { name: `Play ${runningName}` }).click();
    expect((await playlist).url()).toBe(running.body.hls_url);
    await page.getByRole("region", { name: "Player" }).locator("video").waitFor();
    await page.getByRole("button", { name: `Stop ${runningName}` }).click();
    await page.waitForFunction(
      (stream) => document.querySelector(`[data-stream-state="${stream}"]`)?.textContent === "stopped",
      runningName,
      POLLED,
    );
    expect(loads).toBe(0);
  });
});

describe("scheduler and phone", () => {
  test("a reservation made in the page is listed and deleted; a room's mapper id is looked up", async () => {
    const { page } = await operatorPage();
    await chooseAccount(page, account.accountId);
    await page.getByRole("link", { name: "Scheduler" }).click();
    await page.getByLabel("Room").fill("quarterly review");
    await page.getByLabel("Owner e-mail").fill("owner@example.com");
    await page.getByLabel("Starts").fill("2031-03-04T09:30");
    await page.getByLabel("Minutes").fill("45");
    await page.getByLabel("Time zone").fill("Europe/Berlin");
    await page.getByRole("button", { name: "Reserve" }).click();
    // Reservations keep the name as typed (their room key, quarterly%20review, sits beside it).
    await page
      .getByRole("table", { name: "Reservations" })
      .getByRole("cell", { name: "quarterly review", exact: true })
      .waitFor();
    const listed = await call("GET", "/api/v1/scheduler/reservation", {
      headers: { authorization: `Bearer ${account.apiKey}` },
    });
    expect(listed.body).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ name: "quarterly review", duration: 45, timezone: "Europe/Berlin" }),
      ]),
    );
    await page.getByRole("button", { name: "Delete reservation quarterly review" }).click();
    await page.getByText("Reservation quarterly review deleted.").waitFor();
    expect(await page.getByRole("cell", { name: "quarterly review", exact: true }).count()).toBe(0);

    await page.getByRole("link", { name: "Phone" }).click();
    // No numbers yet: the page says the command that adds one, as the repository runs it.
    await page
      .getByText("Dial-in numbers: none; add one on the server with npm run parley -- add-number <account-id>")
      .waitFor();
    await page.getByLabel("Conference address").fill("weekly@conference.meet.example.com");
    await page.getByRole("button", { name: "Look up" }).click();
    const mapped = await call(
      "GET",
      `/api/v1/conference-mapper/conferenceMapper?conference=weekly@conference.meet.example.com`,
      { headers: { authorization: `Bearer ${account.apiKey}` } },
    );
    expect(mapped.body.id).toBeGreaterThan(0);
    await page.getByText(`weekly@conference.meet.example.com: callers enter ${mapped.body.id}`).waitFor();
  });
});

describe("every page", () => {
  test("has no serious axe-core violation, fits a 390 px phone, and is photographed at both widths", async () => {
    const actor = { accountId: account.accountId, userId: "ann", name: "Ann", moderator: false };
    await createRoom(actor, { channelId: "general" });
    const message = await postMessage(actor, "general", { content: "a message to moderate" });
    await createReservation(account.accountId, {
      name: "board meeting",
      mail_owner: "ann@example.com",
      start_time: "2030-01-15T10:00",
      duration: 60,
      timezone: "UTC",
    });

    const pages = ["overview", "usage", "streams", "accounts", "scheduler", "phone", "chat"];
    const found: Record<string, unknown> = {};
    // One signed-in page for both widths: each page is built afresh on arrival, its charts as wide as the window.
    const { context, page } = await operatorPage();
    await chooseAccount(page, account.accountId);
    for (const [label, viewport] of [
      ["desktop", { width: 1280, height: 860 }],
      ["phone", { width: 390, height: 844 }],
    ] as const) {
      await page.setViewportSize(viewport);
      for (const name of pages) {
        await page.evaluate((hash) => {
          location.hash = hash;
        }, `#/${name}`);
        await page.locator("main h1").waitFor();
        await page.waitForFunction(
          () => !document.querySelector("[aria-busy=true]") && document.querySelector("main")!.children.length > 1,
          undefined,
          POLLED,
        );
        // Charts are drawn on the next frame: wait for their canvases.
        await page.waitForFunction(
          () => [...document.querySelectorAll("[data-chart]")].every((chart) => chart.querySelector("canvas")),
          undefined,
          POLLED,
        );
        if (label === "desktop") {
          const violations = await seriousViolations(page);
          if (violations.length > 0) found[name] = violations;
        }
        // Nothing is wider than the phone's screen: tables scroll inside their own box.
        if (label === "phone")
          expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
        await screenshot(page, `console-${name}-${label}`);
      }
      if (label === "desktop") {
        // A moderator's delete from the chat page.
        await page.getByRole("button", { name: `Delete message ${message.id}` }).click();
        await page.getByText("1 message deleted").waitFor();
        expect(await page.getByText("a message to moderate").count()).toBe(0);
      }
    }
    // Nothing outside was asked for, by this test or the ones before it in the page.
    expect(context.blocked).toEqual([]);
    expect(found).toEqual({});
    // Fourteen page loads and seven audits: a machine running two suites needs far more than the usual ceiling.
  }, 120_000);
});
