/**
 * The console's Audit page in a real browser: changes made with an operator token over HTTP
 * appear with who made them and from which address, page by page; an account owner is
 * refused the log.
 */
import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { createOperatorToken } from "../../src/modules/admin/tokens";
import { newAccount } from "../helpers";
import { seriousViolations } from "../support/browser";
import { type ConsoleUnderTest, startConsole } from "../support/console";

// A browser test waits on pages and Chromium; each wait is still bounded by its own.
setDefaultTimeout(30_000);

let ui: ConsoleUnderTest;
const operator = { name: `audit-${crypto.randomUUID().slice(0, 6)}`, password: "audit password" };

beforeAll(async () => {
  ui = await startConsole(operator);
});

afterAll(async () => {
  await ui?.stop();
});

test("an operator reads the changes a token made, newest first, and pages to older ones", async () => {
  const tokenName = `script-${crypto.randomUUID().slice(0, 6)}`;
  const { token } = await createOperatorToken(
    { operator: { kind: "local", name: "local:test", scope: "full" }, address: "unix:test" },
    tokenName,
    "full",
  );
  const account = await newAccount();
  // More changes than one page holds, so the older ones are a click away.
  for (let value = 1; value <= 55; value++) {
    const response = await fetch(`${ui.base}/api/v1/admin/accounts/${account.accountId}/limits/requests.usage`, {
      method: "PUT",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ value }),
    });
    expect(response.status).toBe(200);
  }

  const { context, page } = await ui.operatorPage();
  try {
    await page.getByRole("link", { name: "Audit" }).click();
    const rows = page.locator("tbody tr");
    // A row of this test's own, so the table waited for is the audit log, not the page shown before it.
    await rows.filter({ hasText: tokenName }).first().waitFor();
    expect(await rows.count()).toBe(50);
    const newest = await rows.first().locator("td").allTextContents();
    expect(newest.slice(1, 5)).toEqual([`${tokenName} (token)`, "set-limit", account.accountId, "127.0.0.1"]);
    expect(JSON.parse(newest[5]!)).toEqual({ name: "requests.usage", value: 55 });

    await page.getByRole("button", { name: "Older entries" }).click();
    await page.waitForFunction(() => document.querySelectorAll("tbody tr").length > 50);
    const cells = await Promise.all((await rows.all()).map((row) => row.locator("td").allTextContents()));
    // Every change of this test, once each, newest first.
    const values = cells.filter((row) => row[3] === account.accountId).map((row) => JSON.parse(row[5]!).value);
    expect(values).toEqual(Array.from({ length: 55 }, (_, index) => 55 - index));
    expect(await seriousViolations(page)).toEqual([]);
    // On a phone the table scrolls inside its own box.
    await page.setViewportSize({ width: 390, height: 844 });
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
  } finally {
    await context.close();
  }
});

test("an account owner is refused the audit log, on the page and by its API", async () => {
  const account = await newAccount();
  const context = await ui.chromium.context();
  try {
    const page = await context.newPage();
    await page.goto(`${ui.base}/console#/audit`);
    await page.getByLabel("API key").fill(account.apiKey);
    await page.getByRole("button", { name: "Sign in with API key" }).click();
    await page.getByText("only an operator may do this").waitFor();
    const status = await page.evaluate(async () => (await fetch("/console/api/audit")).status);
    expect(status).toBe(403);
  } finally {
    await context.close();
  }
});
