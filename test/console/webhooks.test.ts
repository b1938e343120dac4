/**
 * The console's Webhooks page in a real browser, with the real webhooks worker delivering
 * to a real receiver on loopback that verifies every request with `standardwebhooks`:
 * an endpoint added in the page, a reservation made through the public API showing up in
 * the page's delivery log with its status code, a failed delivery retried from the page,
 * the secret rotated, an endpoint's delivery limits changed and lifted from the page, an
 * account owner refused another account's endpoints, axe-core and screenshots at desktop and
 * phone width.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import type { Page } from "playwright-core";
import { eq, sql } from "drizzle-orm";
import { overrideConfig } from "../../src/core/config";
import { db } from "../../src/db/client";
import { webhookEndpoints } from "../../src/modules/webhooks/schema";
import { startWebhooksWorker } from "../../src/modules/webhooks/worker";
import { call, newAccount } from "../helpers";
import { POLLED, screenshot, seriousViolations } from "../support/browser";
import { type ConsoleUnderTest, startConsole } from "../support/console";
import { startReceiver } from "../support/webhook-receiver";
import { until } from "../support/wait";

setDefaultTimeout(30_000);

let ui: ConsoleUnderTest;
let worker: ReturnType<typeof startWebhooksWorker>;
let base: string;
let account: Awaited<ReturnType<typeof newAccount>>;
let secret = "";
let receiver: Awaited<ReturnType<typeof startReceiver>>;
const operator = { name: `hooks-${crypto.randomUUID().slice(0, 6)}`, password: "hooks password" };

beforeAll(async () => {
  ui = await startConsole(operator);
  base = ui.base;
  account = await newAccount();
  receiver = await startReceiver(() => secret);
  worker = startWebhooksWorker({ concurrency: 4, sweepIntervalMs: 200 });
});

afterAll(async () => {
  await ui?.stop();
  await worker?.stop();
  receiver?.stop();
});

/** The operator's page, shared by the tests that use it, on the account's webhooks. */
async function operatorOnWebhooks() {
  const { context, page } = await ui.sharedOperatorPage();
  await page.getByLabel("Account").selectOption(account.accountId);
  await page.getByRole("link", { name: "Webhooks" }).click();
  await page.getByRole("button", { name: "Add endpoint" }).waitFor();
  return { context, page };
}

const reserve = (room: string) =>
  call("POST", "/api/v1/scheduler/reservation", {
    headers: { authorization: `Bearer ${account.apiKey}` },
    body: { name: room, mail_owner: "ann@example.com", start_time: "2031-05-06T10:00", duration: 30, timezone: "UTC" },
  });

/** The delivery log's row of the event about a room, as the page shows it. */
async function deliveryRow(page: Page, room: string) {
  const event = receiver.received.find((entry) => entry.event.data.room === room) ?? (await deliveryOf(room));
  return page.getByRole("row").filter({ hasText: event.id });
}

async function deliveryOf(room: string) {
  const listed = await call("GET", "/api/v1/events", { headers: { authorization: `Bearer ${account.apiKey}` } });
  const event = (listed.body.events as Array<{ id: string; data: { room: string } }>).find(
    (candidate) => candidate.data.room === room,
  );
  if (!event) throw new Error(`no event about ${room}`);
  return { id: event.id };
}

describe("webhooks page", () => {
  test("adds an endpoint, shows deliveries with status codes, retries a failed one, rotates the secret", async () => {
    const { context, page } = await operatorOnWebhooks();
    await page.getByLabel("Endpoint URL").fill(receiver.url);
    await page.getByLabel("Description").fill("the test receiver");
    await page.getByText("Event types (none ticked: every type)").click();
    await page.getByRole("checkbox", { name: "reservation.created" }).check();
    await page.getByLabel("Attempts in flight at most (1: serial; empty: no limit)").fill("4");
    await page.getByRole("button", { name: "Add endpoint" }).click();
    secret = (await page.locator("[data-new-secret]").textContent())!;
    expect(secret).toMatch(/^whsec_/);
    const listed = await call("GET", "/api/v1/webhooks", { headers: { authorization: `Bearer ${account.apiKey}` } });
    expect(listed.body.endpoints).toEqual([
      expect.objectContaining({
        url: receiver.url,
        event_types: ["reservation.created"],
        description: "the test receiver",
        enabled: true,
        rate_per_second: null,
        max_in_flight: 4,
      }),
    ]);
    await page.getByRole("cell", { name: "4 in flight" }).waitFor();
    const endpointId = listed.body.endpoints[0].id as string;
    await page.getByRole("button", { name: `Deliveries of ${receiver.url}` }).click();
    await page.getByText(`Deliveries to ${receiver.url}: no deliveries yet.`).waitFor();

    // An event caused through the public API appears in the open log by itself, with the receiver's 200.
    expect((await reserve("hooked")).status).toBe(200);
    const [got] = await until(
      () => receiver.received,
      (list) => list.length >= 1,
    );
    expect(got!.verified).toBe(true);
    const row = await deliveryRow(page, "hooked");
    await row.getByText("succeeded").waitFor();
    expect(await row.locator("[data-delivery-code]").textContent()).toBe("200");
    expect(await row.textContent()).toContain("reservation.created");
    expect(await row.textContent()).toContain("thanks");

    // A failing receiver: with retries far apart the delivery waits with its 500; Retry sends it now.
    const restoreConfig = overrideConfig({ webhooks: { retrySchedule: [600] } });
    try {
      receiver.setMode("error");
      expect((await reserve("broken")).status).toBe(200);
      const failing = await deliveryRow(page, "broken");
      await page.waitForFunction(
        (id) => document.querySelector(`[data-delivery-code="${id}"]`)?.textContent === "500",
        await deliveryIdOf(failing),
        POLLED,
      );
      expect(await failing.textContent()).toContain("receiver broken");
      expect(await failing.textContent()).toContain("pending");
      // Its next retry is ten minutes away, shown in the log.
      const next = await failing.locator("td").nth(7).locator("time").getAttribute("datetime");
      expect(Date.parse(next!) - Date.now()).toBeGreaterThan(500_000);
      receiver.setMode("ok");
      const sentBefore = receiver.received.length;
      await failing.getByRole("button", { name: /^Retry delivery/ }).click();
      await failing.getByText("succeeded").waitFor();
      expect(await failing.locator("[data-delivery-code]").textContent()).toBe("200");
      expect(receiver.received.slice(sentBefore).map((entry) => [entry.event.data.room, entry.verified])).toEqual([
        ["broken", true],
      ]);
    } finally {
      restoreConfig();
      receiver.setMode("ok");
    }

    // A new secret, shown once; deliveries signed with it verify.
    await page.getByRole("button", { name: `Rotate secret of ${receiver.url}` }).click();
    await page.getByText(/^New secret of/).waitFor();
    const rotated = (await page.locator("[data-new-secret]").textContent())!;
    expect(rotated).toMatch(/^whsec_/);
    expect(rotated).not.toBe(secret);
    secret = rotated;
    expect((await reserve("rotated")).status).toBe(200);
    const afterRotation = await until(
      () => receiver.received.find((entry) => entry.event.data.room === "rotated"),
      Boolean,
    );
    expect(afterRotation!.verified).toBe(true);

    // Replay after sequence 0 sends both reservations again (same webhook-ids).
    await page.getByLabel("Replay after sequence").fill("0");
    await page.getByRole("button", { name: "Replay", exact: true }).click();
    await page.getByText(/Replaying to .*: 3 deliveries queued\./).waitFor();
    await until(
      () => receiver.received.filter((entry) => entry.event.data.room === "hooked").length,
      (n) => n >= 2,
    );

    // Disable, and the page shows it; enable again.
    await page.getByRole("button", { name: `Disable ${receiver.url}` }).click();
    await page.locator(`[data-endpoint-state="${endpointId}"]`).getByText("disabled").waitFor();
    await page.getByRole("button", { name: `Enable ${receiver.url}` }).click();
    await page.locator(`[data-endpoint-state="${endpointId}"]`).getByText("enabled").waitFor();
    // Its circuit breaker open, as failures open it: the page says so, and until when; disabling it and enabling
    // it again closes the breaker.
    await db
      .update(webhookEndpoints)
      .set({ circuitOpenUntil: sql`now() + interval '1 hour'` })
      .where(eq(webhookEndpoints.id, endpointId));
    await page.reload();
    await page.locator(`[data-endpoint-state="${endpointId}"]`).getByText("circuit open, probed after").waitFor();
    await page.getByRole("button", { name: `Disable ${receiver.url}` }).click();
    await page.locator(`[data-endpoint-state="${endpointId}"]`).getByText("disabled", { exact: true }).waitFor();
    await page.getByRole("button", { name: `Enable ${receiver.url}` }).click();
    await page.locator(`[data-endpoint-state="${endpointId}"]`).getByText("enabled", { exact: true }).waitFor();
    expect(context.blocked).toEqual([]);
  });

  test("changes an endpoint's delivery limits, lifts them, and says why when the endpoint is gone", async () => {
    const auth = { authorization: `Bearer ${account.apiKey}` };
    const url = `${receiver.url}/limited`;
    const made = await call("POST", "/api/v1/webhooks", {
      headers: auth,
      body: { url, event_types: ["room.ended"], rate_per_second: 5, rate_burst: 10, max_in_flight: 2 },
    });
    expect(made.status).toBe(201);
    const id = made.body.endpoint.id as string;
    const limitsOf = async () => {
      const read = await call("GET", `/api/v1/webhooks/${id}`, { headers: auth });
      const { rate_per_second, rate_burst, max_in_flight } = read.body;
      return { rate_per_second, rate_burst, max_in_flight };
    };
    const { page } = await operatorOnWebhooks();
    const row = page.getByRole("row").filter({ hasText: url });
    await row.getByText("5/s (burst 10), 2 in flight").waitFor();

    // The editor opens on what the endpoint has now.
    await page.getByRole("button", { name: `Limits of ${url}` }).click();
    await page.getByRole("heading", { name: `Limits of ${url}` }).waitFor();
    const editor = page.locator("#edit-limits");
    const rate = editor.getByLabel("Rate (deliveries a second; empty: no limit)");
    const burst = editor.getByLabel("Burst (empty: the rate rounded up)");
    const inFlight = editor.getByLabel("Attempts in flight at most (1: serial; empty: no limit)");
    expect([await rate.inputValue(), await burst.inputValue(), await inFlight.inputValue()]).toEqual(["5", "10", "2"]);
    expect(await page.getByRole("button", { name: `Limits of ${url}` }).getAttribute("aria-pressed")).toBe("true");

    // A fractional rate, the burst emptied (the rate rounded up), one attempt at a time.
    await rate.fill("2.5");
    await burst.fill("");
    await inFlight.fill("1");
    await editor.getByRole("button", { name: "Save limits" }).click();
    await page.getByText(`Setting the limits of ${url}: 2.5/s (burst 3), 1 in flight.`).waitFor();
    expect(await limitsOf()).toEqual({ rate_per_second: 2.5, rate_burst: null, max_in_flight: 1 });
    await row.getByText("2.5/s (burst 3), 1 in flight").waitFor();
    expect([await rate.inputValue(), await burst.inputValue(), await inFlight.inputValue()]).toEqual(["2.5", "", "1"]);

    // Emptying one field lifts that limit alone.
    await rate.fill("");
    await editor.getByRole("button", { name: "Save limits" }).click();
    await page.getByText(`Setting the limits of ${url}: 1 in flight.`).waitFor();
    expect(await limitsOf()).toEqual({ rate_per_second: null, rate_burst: null, max_in_flight: 1 });

    // No limits lifts every one, whatever the fields hold.
    await rate.fill("7");
    await editor.getByRole("button", { name: "No limits" }).click();
    await page.getByText(`Setting the limits of ${url}: none.`).waitFor();
    expect(await limitsOf()).toEqual({ rate_per_second: null, rate_burst: null, max_in_flight: null });
    await row.getByRole("cell", { name: "none", exact: true }).waitFor();
    expect([await rate.inputValue(), await burst.inputValue(), await inFlight.inputValue()]).toEqual(["", "", ""]);

    // The endpoint deleted elsewhere while the editor is open: the page says so, and nothing is made.
    expect((await call("DELETE", `/api/v1/webhooks/${id}`, { headers: auth })).status).toBe(204);
    await inFlight.fill("3");
    await editor.getByRole("button", { name: "Save limits" }).click();
    await page.getByText(`Setting the limits of ${url}: no webhook endpoint ${id}`).waitFor();
    expect((await call("GET", `/api/v1/webhooks/${id}`, { headers: auth })).status).toBe(404);

    await editor.getByRole("button", { name: "Close" }).click();
    await page.getByRole("heading", { name: `Limits of ${url}` }).waitFor({ state: "detached" });
  });

  test("an account owner cannot reach another account's endpoints through the console API", async () => {
    const mine = await newAccount();
    const theirs = await newAccount();
    const made = await call("POST", "/api/v1/webhooks", {
      headers: { authorization: `Bearer ${theirs.apiKey}` },
      body: { url: receiver.url },
    });
    expect(made.status).toBe(201);
    const theirEndpoint = made.body.endpoint.id as string;
    const context = await ui.chromium.context();
    const page = await context.newPage();
    await page.goto(`${base}/console`);
    await page.getByLabel("API key").fill(mine.apiKey);
    await page.getByRole("button", { name: "Sign in with API key" }).click();
    await page.locator("[data-figure=rooms_open]").waitFor();
    const crafted = await page.evaluate(
      async ({ mine, other, endpoint }) => {
        const csrf = (await (await fetch("/console/api/session")).json()).csrf_token;
        const results = [];
        for (const [method, path, body] of [
          ["GET", `/console/api/webhooks?account=${other}`],
          ["GET", `/console/api/webhooks/${endpoint}/deliveries?account=${other}`],
          ["POST", `/console/api/webhooks/${endpoint}/rotate-secret`, { account: other }],
          ["DELETE", `/console/api/webhooks/${endpoint}?account=${other}`],
          // Naming its own account with the other's endpoint: not found in its account.
          ["GET", `/console/api/webhooks/${endpoint}/deliveries?account=${mine}`],
          ["POST", `/console/api/webhooks/${endpoint}/rotate-secret`, { account: mine }],
          ["PATCH", `/console/api/webhooks/${endpoint}`, { account: mine, enabled: false }],
          ["POST", `/console/api/webhooks/${endpoint}/replay`, { account: mine, after: 0 }],
          ["DELETE", `/console/api/webhooks/${endpoint}?account=${mine}`],
        ] as Array<[string, string, unknown?]>) {
          const response = await fetch(path, {
            method,
            headers: { "x-csrf-token": csrf, "content-type": "application/json" },
            body: body === undefined ? undefined : JSON.stringify(body),
          });
          results.push({
            path: `${method} ${path}`,
            status: response.status,
            code: (await response.json()).error?.code,
          });
        }
        // Without the CSRF token nothing changes.
        const noCsrf = await fetch(`/console/api/webhooks`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ account: mine, url: "http://127.0.0.1:9/x" }),
        });
        return { results, noCsrf: noCsrf.status };
      },
      { mine: mine.accountId, other: theirs.accountId, endpoint: theirEndpoint },
    );
    expect(crafted.results.slice(0, 4).map((result) => [result.path, result.status, result.code])).toEqual(
      crafted.results.slice(0, 4).map((result) => [result.path, 403, "forbidden"]),
    );
    expect(crafted.results.slice(4).map((result) => [result.path, result.status, result.code])).toEqual(
      crafted.results.slice(4).map((result) => [result.path, 404, "not_found"]),
    );
    expect(crafted.noCsrf).toBe(403);
    // The other account's endpoint is untouched, and the owner's page lists nothing of it.
    const still = await call("GET", `/api/v1/webhooks/${theirEndpoint}`, {
      headers: { authorization: `Bearer ${theirs.apiKey}` },
    });
    expect(still.body).toMatchObject({ id: theirEndpoint, enabled: true });
    await page.getByRole("link", { name: "Webhooks" }).click();
    await page.getByText("Endpoints: no endpoints yet.").waitFor();
    await context.close();
  });

  test("has no serious axe-core violation, fits a 390 px phone, and is photographed at both widths", async () => {
    // One page for both widths, the log, the limits editor and the event types open: the page lays itself out
    // again as the window narrows.
    const { page } = await operatorOnWebhooks();
    await page.getByRole("button", { name: `Deliveries of ${receiver.url}` }).click();
    await page.getByRole("table", { name: `Deliveries to ${receiver.url}` }).waitFor();
    await page.getByRole("button", { name: `Limits of ${receiver.url}` }).click();
    await page.getByRole("heading", { name: `Limits of ${receiver.url}` }).waitFor();
    await page.getByText("Event types (none ticked: every type)").click();
    for (const [label, viewport] of [
      ["desktop", { width: 1280, height: 860 }],
      ["phone", { width: 390, height: 844 }],
    ] as const) {
      await page.setViewportSize(viewport);
      expect(await seriousViolations(page)).toEqual([]);
      expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(viewport.width);
      await screenshot(page, `console-webhooks-${label}`);
    }
  });
});

async function deliveryIdOf(row: ReturnType<Page["getByRole"]>): Promise<string> {
  await row.locator("[data-delivery-code]").waitFor();
  return (await row.locator("[data-delivery-code]").getAttribute("data-delivery-code"))!;
}
