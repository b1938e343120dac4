/**
 * Signing in to the console in a real browser: operators and account owners, the session
 * cookie, logout, the sign-in limit, and an owner's session refused another account's data.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import type { Page } from "playwright-core";
import { eq } from "drizzle-orm";
import { SignJWT } from "jose";
import { db } from "../../src/db/client";
import { consoleSessions } from "../../src/modules/console/schema";
import { listAccounts, revokeApiKey } from "../../src/modules/accounts/service";
import { consoleSecret, loginBlockedFor, operatorLogin } from "../../src/modules/console/sessions";
import { recordChange } from "../../src/modules/audit/service";
import { createOperator } from "../../src/modules/operators/service";
import { newAccount } from "../helpers";
import type { Chromium } from "../support/browser";
import { type ConsoleUnderTest, startConsole } from "../support/console";

// A browser test waits on pages, workers and Chromium; each test still bounds its own waits.
setDefaultTimeout(30_000);

let ui: ConsoleUnderTest;
let chromium: Chromium;
let base: string;
const operator = { name: `ops-${crypto.randomUUID().slice(0, 6)}`, password: "correct horse battery" };

beforeAll(async () => {
  ui = await startConsole(operator);
  ({ base, chromium } = ui);
});

afterAll(async () => {
  await ui?.stop();
});

const signInAsOperator = (page: Page, password?: string, name?: string) => ui.signIn(page, password, name);

describe("the sign-in page", () => {
  test("says where each credential comes from", async () => {
    const context = await chromium.context();
    const page = await context.newPage();
    await page.goto(`${base}/console`);
    const operatorForm = page.locator("#operator-login");
    const ownerForm = page.locator("#account-login");
    await operatorForm.getByText("npm run parley -- create-operator <name>").waitFor();
    await ownerForm.getByText("data/first-api-key").waitFor();
    await ownerForm.getByText("npm run parley -- create-key <account-id>").waitFor();
    await context.close();
  });
});

describe("operator", () => {
  test("signs in, sees the overview, signs out; the old cookie no longer works", async () => {
    const context = await chromium.context();
    const page = await context.newPage();
    await signInAsOperator(page);
    await page.getByRole("heading", { name: "Overview", level: 1 }).waitFor();
    await page.locator("[data-figure=rooms_open]").waitFor();
    expect(await page.getByText(`Operator: ${operator.name}`).isVisible()).toBe(true);
    expect(await page.getByRole("link", { name: "API reference" }).getAttribute("href")).toBe("/swagger");

    const [cookie] = (await context.cookies()).filter((c) => c.name === "parley_console");
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: "Strict", path: "/console", secure: false });
    // The JWT in the cookie is short-lived.
    const claims = JSON.parse(Buffer.from(cookie!.value.split(".")[1]!, "base64url").toString());
    expect(claims.exp - claims.iat).toBe(900);

    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByRole("button", { name: "Sign in as operator" }).waitFor();
    // Replaying the cookie from before the logout is refused: the session was revoked. The
    // probe says so as an answer (signed out); every other call is refused.
    const replay = await fetch(`${base}/console/api/accounts`, {
      headers: { cookie: `parley_console=${cookie!.value}` },
    });
    expect(replay.status).toBe(401);
    expect((await replay.json()).error.code).toBe("unauthorized");
    const probe = await fetch(`${base}/console/api/session`, {
      headers: { cookie: `parley_console=${cookie!.value}` },
    });
    expect(probe.status).toBe(200);
    expect(await probe.json()).toEqual({ signed_in: false });
    await context.close();
  });

  test("the keyboard alone signs in and moves between pages", async () => {
    const context = await chromium.context();
    const page = await context.newPage();
    await page.goto(`${base}/console`);
    await page.getByLabel("Name").waitFor();
    // The name field has the focus on arrival.
    await page.keyboard.type(operator.name);
    await page.keyboard.press("Tab");
    await page.keyboard.type(operator.password);
    await page.keyboard.press("Enter");
    await page.locator("[data-figure=rooms_open]").waitFor();
    // The first Tab reaches the skip link; Enter on it puts the focus on the page itself.
    await page.keyboard.press("Tab");
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe("Skip to the page");
    let reached = "";
    for (let presses = 0; presses < 12 && reached !== "Usage"; presses++) {
      await page.keyboard.press("Tab");
      reached = await page.evaluate(() => document.activeElement?.textContent ?? "");
    }
    expect(reached).toBe("Usage");
    await page.keyboard.press("Enter");
    await page.getByRole("heading", { name: "Usage", level: 1 }).waitFor();
    expect(await page.evaluate(() => document.activeElement?.id)).toBe("page");
    await context.close();
  });

  test("a wrong password is refused, and after five failures even the right one waits", async () => {
    const context = await chromium.context();
    const page = await context.newPage();
    const name = `limited-${crypto.randomUUID().slice(0, 6)}`;
    await createOperator(name, "the right password");
    await page.goto(`${base}/console`);
    await page.getByLabel("Name").fill(name);
    const attempt = async (password: string) => {
      await page.getByLabel("Password").fill(password);
      await page.getByRole("button", { name: "Sign in as operator" }).click();
      await page.getByText("Signing in…").waitFor({ state: "detached" });
    };
    for (let tries = 0; tries < 5; tries++) {
      await attempt(`wrong ${tries}`);
      expect(await page.getByRole("status").textContent()).toBe("wrong operator name or password");
    }
    await attempt("the right password");
    await page.getByText(/too many failed sign-ins/).waitFor();
    expect((await context.cookies()).some((c) => c.name === "parley_console")).toBe(false);
    const direct = await fetch(`${base}/console/api/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name, password: "the right password" }),
    });
    expect(direct.status).toBe(429);
    expect(direct.headers.get("retry-after")).toMatch(/^\d+$/);
    await context.close();
  });

  test("a change without the CSRF token is refused", async () => {
    const context = await chromium.context();
    const page = await context.newPage();
    await signInAsOperator(page);
    await page.locator("[data-figure=rooms_open]").waitFor();
    const answer = await page.evaluate(async () => {
      const response = await fetch("/console/api/accounts", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name: "sneaky" }),
      });
      return { status: response.status, body: await response.json() };
    });
    expect(answer).toEqual({
      status: 403,
      body: { error: { code: "forbidden", message: expect.stringContaining("X-CSRF-Token") } },
    });
    await context.close();
  });
});

describe("the audit page", () => {
  test("at 1280 px a long detail wraps inside the table's box instead of widening it", async () => {
    const long = Object.fromEntries(
      Array.from({ length: 12 }, (_, index) => [`field_${index}`, crypto.randomUUID().replaceAll("-", "")]),
    );
    await recordChange(
      db,
      { operator: { kind: "local", name: "local:0", scope: "full" }, address: "unix:/tmp/parley.sock" },
      { action: "set-limit", target: "acc_wide", detail: long },
    );
    const context = await chromium.context({ width: 1280, height: 860 });
    const page = await context.newPage();
    await signInAsOperator(page);
    await page.locator("[data-figure=rooms_open]").waitFor();
    await page.evaluate(() => {
      location.hash = "#/audit";
    });
    await page.getByText("acc_wide").first().waitFor();
    const box = await page
      .locator(".table-wrap")
      .first()
      .evaluate((wrap) => ({
        scroll: wrap.scrollWidth,
        client: wrap.clientWidth,
      }));
    expect(box.scroll).toBeLessThanOrEqual(box.client);
    await context.close();
  });
});

describe("sign-in limits", () => {
  test("one address guessing many names is stopped too, and a good sign-in does not reset that", async () => {
    // A documentation address (TEST-NET-2): no other test signs in from it.
    const address = "198.51.100.7";
    const name = `spray-${crypto.randomUUID().slice(0, 6)}`;
    await createOperator(name, "the right password");
    for (let guess = 0; guess < 19; guess++) {
      await expect(operatorLogin(`nobody-${guess}`, "guess", { address, name: `nobody-${guess}` })).rejects.toThrow(
        "wrong operator name or password",
      );
    }
    // Every name stayed under its own limit of 5; the address has one failure left.
    expect(await loginBlockedFor({ address, name: "someone-new" })).toBe(0);
    await operatorLogin(name, "the right password", { address, name });
    await expect(operatorLogin("nobody-last", "guess", { address, name: "nobody-last" })).rejects.toThrow();
    expect(await loginBlockedFor({ address, name: "someone-new" })).toBeGreaterThan(800);
    expect(await loginBlockedFor({ address: "198.51.100.8", name: "someone-new" })).toBe(0);
  });
});

describe("account owner", () => {
  test("signs in with an API key, sees only its account, and is refused another account's data", async () => {
    const mine = await newAccount();
    const theirs = await newAccount();
    const context = await chromium.context();
    const page = await context.newPage();
    await page.goto(`${base}/console`);
    await page.getByLabel("API key").fill(mine.apiKey);
    await page.getByRole("button", { name: "Sign in with API key" }).click();
    await page.locator("[data-figure=rooms_open]").waitFor();

    const options = await page.getByLabel("Account").locator("option").allTextContents();
    expect(options).toEqual([expect.stringContaining(mine.accountId)]);
    await page.getByRole("link", { name: "Accounts and keys" }).click();
    await page.locator(`[data-account="${mine.accountId}"]`).waitFor();
    expect(await page.locator(`[data-account="${theirs.accountId}"]`).count()).toBe(0);

    const crafted = await page.evaluate(async (other) => {
      const csrf = (await (await fetch("/console/api/session")).json()).csrf_token;
      const results = [];
      for (const [method, path] of [
        ["GET", `/console/api/usage?account=${other}`],
        ["GET", `/console/api/streams?account=${other}`],
        ["GET", `/console/api/overview?account=${other}`],
        ["POST", `/console/api/accounts/${other}/keys`],
      ]) {
        const response = await fetch(path!, {
          method,
          headers: { "x-csrf-token": csrf, "content-type": "application/json" },
          body: method === "POST" ? "{}" : undefined,
        });
        results.push({ path, status: response.status, code: (await response.json()).error?.code });
      }
      return results;
    }, theirs.accountId);
    for (const result of crafted) expect(result).toMatchObject({ status: 403, code: "forbidden" });

    // Revoking the key the owner signed in with ends the session: the page asks to sign in again.
    const [key] = (await listAccounts()).find((account) => account.id === mine.accountId)!.apiKeys;
    await revokeApiKey(key!.id);
    await page.getByRole("link", { name: "Usage" }).click();
    await page.getByText("Your session has ended; sign in again.").waitFor();
    await context.close();
  });

  test("a wrong API key is refused", async () => {
    const answer = await fetch(`${base}/console/api/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ api_key: "prl_nothing" }),
    });
    expect(answer.status).toBe(401);
    expect((await answer.json()).error.code).toBe("invalid_api_key");
  });
});

describe("session token", () => {
  const sign = (claims: Record<string, unknown>, iat: number, exp: number) =>
    new SignJWT(claims)
      .setProtectedHeader({ alg: "HS256" })
      .setIssuedAt(iat)
      .setExpirationTime(exp)
      .sign(new TextEncoder().encode(consoleSecret()));

  async function sessionId(): Promise<string> {
    const login = await fetch(`${base}/console/api/login`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(operator),
    });
    const token = /parley_console=([^;]+)/.exec(login.headers.get("set-cookie")!)![1]!;
    return JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString()).sid;
  }

  test("is renewed once half its life is gone, and refused once expired", async () => {
    const sid = await sessionId();
    const now = Math.floor(Date.now() / 1000);
    const young = await fetch(`${base}/console/api/session`, {
      headers: { cookie: `parley_console=${await sign({ sid }, now - 10, now + 890)}` },
    });
    expect(young.status).toBe(200);
    expect(young.headers.get("set-cookie")).toBeNull();
    const old = await fetch(`${base}/console/api/session`, {
      headers: { cookie: `parley_console=${await sign({ sid }, now - 600, now + 300)}` },
    });
    expect(old.status).toBe(200);
    const renewed = /parley_console=([^;]+)/.exec(old.headers.get("set-cookie") ?? "")?.[1];
    expect(JSON.parse(Buffer.from(renewed!.split(".")[1]!, "base64url").toString())).toMatchObject({
      sid,
      exp: expect.any(Number),
    });
    expect(old.headers.get("set-cookie")).toContain("HttpOnly; SameSite=Strict");
    const expired = await fetch(`${base}/console/api/accounts`, {
      headers: { cookie: `parley_console=${await sign({ sid }, now - 1000, now - 100)}` },
    });
    expect(expired.status).toBe(401);
    const probed = await fetch(`${base}/console/api/session`, {
      headers: { cookie: `parley_console=${await sign({ sid }, now - 1000, now - 100)}` },
    });
    expect(await probed.json()).toEqual({ signed_in: false });
  });

  test("sessions past their end are swept away by the next sign-in", async () => {
    const sid = await sessionId();
    await db
      .update(consoleSessions)
      .set({ expiresAt: new Date(Date.now() - 1000) })
      .where(eq(consoleSessions.id, sid));
    const now = Math.floor(Date.now() / 1000);
    const answer = await fetch(`${base}/console/api/accounts`, {
      headers: { cookie: `parley_console=${await sign({ sid }, now, now + 900)}` },
    });
    expect(answer.status).toBe(401);
    await sessionId();
    expect(await db.select().from(consoleSessions).where(eq(consoleSessions.id, sid))).toEqual([]);
  });

  test("a request without a session is refused before its body is read", async () => {
    const answer = await fetch(`${base}/console/api/accounts`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{not json",
    });
    expect(answer.status).toBe(401);
    expect((await answer.json()).error.code).toBe("unauthorized");
    const forged = await fetch(`${base}/console/api/accounts`, {
      headers: { cookie: "parley_console=eyJhbGciOiJub25lIn0.eyJzaWQiOiJ4In0." },
    });
    expect(forged.status).toBe(401);
    const probe = await fetch(`${base}/console/api/session`, {
      headers: { cookie: "parley_console=eyJhbGciOiJub25lIn0.eyJzaWQiOiJ4In0." },
    });
    expect(await probe.json()).toEqual({ signed_in: false });
  });
});
