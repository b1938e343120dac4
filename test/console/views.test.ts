/**
 * What the console's pages show, in Chromium at 1280 and 390 px, to a viewer in another locale
 * and time zone: the API's fields read right (chat's time and author), one date format (the
 * viewer's), human room names, chart legends with values, scales and ticks that fit the data,
 * nothing cut off on a phone, no error in the browser's console signed in or out, axe-core
 * clean; and the account the console opens on.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import type { Page } from "playwright-core";
import { createAccount } from "../../src/modules/accounts/service";
import { postMessage } from "../../src/modules/chat/posting";
import { createRoom } from "../../src/modules/chat/rooms";
import { createReservation } from "../../src/modules/scheduler/reservations";
import { stopStateSubscriber } from "../../src/modules/streaming/state";
import { createEndpoint } from "../../src/modules/webhooks/service";
import { type RecorderWorker, startRecorderWorker } from "../../workers/recorder";
import { commandDriver } from "../../workers/recorder/command";
import { call } from "../helpers";
import { cutOff, POLLED, screenshot, seriousViolations, watchProblems } from "../support/browser";
import { foldQueued } from "../support/cdr-worker";
import { type ConsoleUnderTest, startConsole } from "../support/console";
import { deliver, occupantJoined, occupantLeft, roomCreated, roomDestroyed } from "../support/event-sync";

setDefaultTimeout(60_000);

// A recorder that dies a moment after it started: the stream fails, with a reason to show.
const RECORDER = "echo ready\nsleep 1\nexit 3";
/** A room as jitsi-meet names it: the key of "weekly sync ☕". */
const ROOM = "weekly%20sync%20%e2%98%95";
const VIEWER = { locale: "de-DE", timezoneId: "Asia/Kolkata" };
const WIDTHS = [
  ["desktop", { width: 1280, height: 860 }],
  ["phone", { width: 390, height: 844 }],
] as const;

/** Pages name an account by its name, not its id. */
const ACCOUNT_NAME = `Globex ${crypto.randomUUID().slice(0, 6)}`;

let ui: ConsoleUnderTest;
let worker: RecorderWorker;
let account: { accountId: string; apiKey: string };
let message: { id: number; inserted_at: string };
let failedStream: string;
const operator = { name: `views-${crypto.randomUUID().slice(0, 6)}`, password: "views password" };

beforeAll(async () => {
  ui = await startConsole(operator);
  const made = await createAccount(ACCOUNT_NAME, "EdDSA");
  account = { accountId: made.account.id, apiKey: made.apiKey.apiKey };
  worker = await startRecorderWorker(commandDriver(RECORDER));

  const now = Math.floor(Date.now() / 1000);
  const created = Math.max(now - (now % 86_400), now - 3600);
  const ann = { name: "Ann", id: "ann", occupant_jid: `${ROOM}@conference.meet.example.com/ann` };
  for (const delivery of [
    roomCreated(ROOM, created),
    occupantJoined(ROOM, ann, created + 60, 1),
    occupantLeft(ROOM, ann, created + 60, created + 660, 0),
    roomDestroyed(ROOM, created, created + 700, []),
  ]) {
    expect((await deliver(account.apiKey, delivery)).status).toBe(200);
  }
  await foldQueued();

  const actor = { accountId: account.accountId, userId: "ann", name: "Ann", moderator: false };
  // A room with nothing in it comes first: the chat page opens on one that has messages.
  await createRoom(actor, { channelId: "announcements" });
  await createRoom(actor, { channelId: "general" });
  message = await postMessage(actor, "general", { content: "hello from Ann" });
  await createReservation(account.accountId, {
    name: "board meeting",
    mail_owner: "ann@example.com",
    start_time: "2030-01-15T10:00",
    duration: 60,
    timezone: "Europe/Berlin",
  });
  await createEndpoint(account.accountId, {
    url: "http://127.0.0.1:9/parley-hook-with-a-rather-long-path-to-wrap",
    description: "ops",
    event_types: null,
    ordered: false,
  });
  const started = await call("POST", "/terraform/v1/hooks/srs/startRecording", {
    body: { room_name: "crash-review" },
    headers: { authorization: `Bearer ${account.apiKey}` },
  });
  failedStream = started.body.stream_name;
});

afterAll(async () => {
  await ui?.stop();
  await worker?.stop();
  await stopStateSubscriber();
});

/**
 * The viewer's page at a width: opened by the signed-out test of that width, which loads the
 * console in it first, and signed in by the test of every page at that width, which closes it.
 * A context and its first page cost Chromium most of a second of CPU.
 */
const atWidth = new Map<string, Awaited<ReturnType<typeof openAt>>>();
async function openAt(viewport: { width: number; height: number }) {
  const context = await ui.chromium.context(viewport, VIEWER);
  return { context, page: await context.newPage() };
}
async function viewerAt(label: string, viewport: { width: number; height: number }) {
  const open = atWidth.get(label);
  if (open && !open.page.isClosed()) return open;
  const opened = await openAt(viewport);
  atWidth.set(label, opened);
  return opened;
}

/** Shows a page of the console and waits until it has drawn its data and charts. */
async function visit(page: Page, name: string): Promise<void> {
  await page.evaluate((hash) => {
    location.hash = hash;
  }, `#/${name}`);
  await page.waitForFunction(
    (path) =>
      document.querySelector(`nav a[data-page="${path}"][aria-current=page]`) &&
      !document.querySelector("[aria-busy=true]") &&
      document.querySelector("main")!.children.length > 1 &&
      [...document.querySelectorAll("[data-chart]")].every((chart) => chart.querySelector("canvas")),
    name,
    POLLED,
  );
}

/** The instant as the viewer of VIEWER reads it, formatted by the browser itself. */
const asViewerReads = (page: Page, iso: string) =>
  page.evaluate(
    ([at, viewer]) =>
      new Intl.DateTimeFormat(viewer.locale, {
        dateStyle: "medium",
        timeStyle: "medium",
        timeZone: viewer.timezoneId,
      }).format(new Date(at)),
    [iso, VIEWER] as const,
  );

describe("signed out", () => {
  for (const [label, viewport] of WIDTHS) {
    test(`the first load of /console logs no error and fits (${label})`, async () => {
      const { context, page } = await viewerAt(label, viewport);
      const problems = watchProblems(page);
      const probe = page.waitForResponse((response) => response.url().endsWith("/console/api/session"));
      await page.goto(`${ui.base}/console`);
      await page.getByRole("button", { name: "Sign in as operator" }).waitFor();
      expect((await probe).status()).toBe(200);
      expect(await (await probe).json()).toEqual({ signed_in: false });
      expect(await cutOff(page)).toEqual([]);
      expect(await seriousViolations(page)).toEqual([]);
      await screenshot(page, `views-login-${label}`);
      expect(problems).toEqual([]);
      expect(context.blocked).toEqual([]);
    });
  }
});

describe("every page", () => {
  for (const [label, viewport] of WIDTHS) {
    test(`fields, one date format, telling charts; nothing cut off, no errors, axe clean (${label})`, async () => {
      const { context, page } = await viewerAt(label, viewport);
      const problems = watchProblems(page);
      await ui.signIn(page);
      await page.locator("[data-figure=rooms_open]").waitFor();
      await page.getByLabel("Account").selectOption(account.accountId);
      const violations: Record<string, unknown> = {};
      for (const name of ["overview", "usage", "streams", "accounts", "scheduler", "phone", "chat", "webhooks"]) {
        await visit(page, name);
        const text = (await page.locator("main").textContent()) ?? "";
        // One date format: no ISO dates or times in the page, and no escaped room names.
        expect(text).not.toMatch(/\b\d{4}-\d\d-\d\d\b/);
        expect(text).not.toContain("%20");
        // Every chart's legend tells the values of its last point, not "--".
        for (const legend of await page.locator(".u-legend").allTextContents()) expect(legend).not.toContain("--");
        expect(await cutOff(page)).toEqual([]);
        const serious = await seriousViolations(page);
        if (serious.length > 0) violations[name] = serious;
        await screenshot(page, `views-${name}-${label}`);

        if (name === "overview") {
          await page
            .getByRole("table", { name: "Failures in the last 24 hours" })
            .getByRole("cell", { name: ACCOUNT_NAME, exact: true })
            .first()
            .waitFor();
          // No calls in this account: the calls chart's scale is a few units, not 0–100.
          const calls = await page.evaluate(() => {
            const plot = window.parleyCharts["overview-calls"]!;
            return { values: Array.from(plot.data[1] as ArrayLike<number>), max: plot.scales.y!.max };
          });
          expect(calls.values.every((value) => value === 0)).toBe(true);
          expect(calls.max).toBe(4);
        }
        if (name === "usage") {
          await page.getByRole("cell", { name: "weekly sync ☕", exact: true }).waitFor();
          // Every stay has ended: said in words, not "0 stays still open are counted".
          await page.getByText(/to the leave; none is still open, as of /).waitFor();
          // One tick per day, at the UTC midnights the bars stand on, labelled as days.
          const axis = await page.evaluate(() => {
            const plot = window.parleyCharts["usage-minutes"]! as unknown as {
              axes: Array<{ _splits: number[]; _values: string[] }>;
            };
            return { splits: plot.axes[0]!._splits, values: plot.axes[0]!._values };
          });
          expect(axis.splits.length).toBeGreaterThan(0);
          for (const split of axis.splits) expect(split % 86_400).toBe(0);
          for (const value of axis.values) expect(value).not.toMatch(/:/);
          // The legend tells the last day's figures, the hovered day's while one is hovered, then the last day's again.
          const legend = page.locator("[data-chart=usage-minutes] .u-legend");
          const days = await page.evaluate(() =>
            Array.from(window.parleyCharts["usage-minutes"]!.data[0] as ArrayLike<number>),
          );
          const dayText = (at: number) =>
            page.evaluate(
              (ms) => new Intl.DateTimeFormat("de-DE", { dateStyle: "medium", timeZone: "UTC" }).format(ms),
              at * 1000,
            );
          expect(await legend.textContent()).toContain(await dayText(days.at(-1)!));
          expect(await legend.textContent()).toMatch(/Participant:?\s*\d/);
          await page.locator("[data-chart=usage-minutes] .u-over").hover({ position: { x: 3, y: 20 } });
          expect(await legend.textContent()).toContain(await dayText(days[0]!));
          await page.getByRole("heading", { name: "Usage", level: 1 }).hover();
          expect(await legend.textContent()).toContain(await dayText(days.at(-1)!));
        }
        if (name === "streams") {
          const row = page.getByRole("row", { name: new RegExp(failedStream) });
          await row.getByText("failed", { exact: true }).waitFor();
          await row.getByText(/recorder_exited/).waitFor();
          await row.getByRole("cell", { name: ACCOUNT_NAME, exact: true }).waitFor();
        }
        if (name === "chat") {
          // The message's time as the viewer reads it, and its author's name.
          const row = page.getByRole("row", { name: /hello from Ann/ });
          await row.getByText(await asViewerReads(page, message.inserted_at), { exact: true }).waitFor();
          await row.getByRole("cell", { name: "Ann", exact: true }).waitFor();
        }
        if (name === "scheduler") {
          // A reservation's start as written, in its own zone, in the viewer's format.
          await page.getByRole("cell", { name: "15.01.2030, 10:00:00", exact: true }).waitFor();
        }
      }
      expect(violations).toEqual({});
      expect(problems).toEqual([]);
      expect(context.blocked).toEqual([]);
      await context.close();
    });
  }
});

describe("the account in view", () => {
  test("opens on the account last chosen here; a page about one account never waits for a choice", async () => {
    const other = await createAccount(`other-${crypto.randomUUID().slice(0, 6)}`);
    const context = await ui.chromium.context();
    const page = await context.newPage();
    const problems = watchProblems(page);
    await ui.signIn(page);
    await page.locator("[data-figure=rooms_open]").waitFor();
    const picker = page.getByLabel("Account");
    await picker.selectOption(other.account.id);
    await page.reload();
    await page.locator("[data-figure=rooms_open]").waitFor();
    expect(await picker.inputValue()).toBe(other.account.id);

    // Every account chosen: the overview covers them all; a page about one shows the last one chosen.
    await picker.selectOption("");
    await visit(page, "usage");
    expect(await picker.inputValue()).toBe(other.account.id);
    await page.getByText(/meetings? ·/).waitFor();
    await visit(page, "overview");
    expect(await picker.inputValue()).toBe("");
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByRole("button", { name: "Sign in as operator" }).waitFor();
    expect(problems).toEqual([]);
    await context.close();
  });
});
