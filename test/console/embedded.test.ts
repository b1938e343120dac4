/**
 * The console on the embedded database, as a new user meets it: no DATABASE_URL, an operator
 * made with the admin command (password on stdin), Parley started, sign-in and the overview
 * in a real browser. The data folder starts as the migrations leave it, with no operator and
 * no account: PGlite's initdb and every migration on an empty folder cost about 12 s of CPU,
 * and test/supervisor.test.ts makes a first start on an empty folder already.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { resolve } from "node:path";
import { type Chromium, seriousViolations, startChromium, watchProblems } from "../support/browser";
import { migratedDataDir } from "../support/parley";
import { freePort } from "../support/ports";

const root = resolve(import.meta.dir, "../..");
// A folder no earlier run can have left (a pid is reused): the test's operator must be the first.
const dataDir = mkdtempSync(resolve(tmpdir(), "parley-console-embedded-"));
let env: Record<string, string>;
let service: ReturnType<typeof Bun.spawn> | undefined;
let chromium: Chromium | undefined;

beforeAll(async () => {
  await migratedDataDir(dataDir);
  env = {
    ...(process.env as Record<string, string>),
    LOG_LEVEL: "silent",
    DATA_DIR: dataDir,
    REDIS_PREFIX: `parley-test-console-${crypto.randomUUID()}`,
  };
  delete env.DATABASE_URL;
  delete env.CONSOLE_SECRET;
});

afterAll(async () => {
  await chromium?.close();
  service?.kill("SIGKILL");
  await service?.exited;
  rmSync(dataDir, { recursive: true, force: true });
});

test("an operator made with the command line signs in to the console on PGlite", async () => {
  const admin = Bun.spawn([process.execPath, "src/parley.ts", "create-operator", "root"], {
    cwd: root,
    env,
    stdin: new Blob(["first operator password\n"]),
    stdout: "pipe",
    stderr: "pipe",
  });
  expect(await admin.exited).toBe(0);
  expect(await new Response(admin.stdout).text()).toContain("operator #1 root");

  const port = await freePort();
  service = Bun.spawn([process.execPath, "src/index.ts"], {
    cwd: root,
    env: { ...env, PORT: String(port), HOST: "127.0.0.1", SIP_ENABLED: "false", BOOTSTRAP_ACCOUNT: "true" },
    stdout: "ignore",
    stderr: "inherit",
  });
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  while (
    !(await fetch(`${base}/readyz`).then(
      (r) => r.ok,
      () => false,
    ))
  ) {
    if (Date.now() > deadline) throw new Error("Parley did not become ready on PGlite");
    await Bun.sleep(200);
  }

  chromium = await startChromium();
  const context = await chromium.context();
  const page = await context.newPage();
  const problems = watchProblems(page);
  await page.goto(`${base}/console`);
  await page.getByLabel("Name").fill("root");
  await page.getByLabel("Password").fill("first operator password");
  await page.getByRole("button", { name: "Sign in as operator" }).click();
  await page.locator("[data-figure=rooms_open]").waitFor({ timeout: 15_000 });
  // The bootstrap account is there, chosen, since it is the only one, and the overview's charts have a day of points.
  expect(await page.getByLabel("Account").locator("option").allTextContents()).toEqual([
    "All accounts",
    expect.stringContaining("default"),
  ]);
  expect(await page.getByLabel("Account").locator("option:checked").textContent()).toContain("default");
  const points = await page.evaluate(() => window.parleyCharts["overview-participants"]?.data[0].length);
  expect(points).toBeGreaterThanOrEqual(144);
  expect(await seriousViolations(page)).toEqual([]);
  expect(context.blocked).toEqual([]);
  // A page about one account shows it at once, with no account to pick first.
  await page.getByRole("link", { name: "Usage" }).click();
  await page.getByText(/meetings? ·/).waitFor();
  await page.getByRole("link", { name: "Webhooks" }).click();
  await page.getByRole("button", { name: "Add endpoint" }).waitFor();
  expect(problems).toEqual([]);
  // No CONSOLE_SECRET: one was generated into the data folder, readable by its owner only.
  expect(statSync(resolve(dataDir, "console-secret")).mode & 0o777).toBe(0o600);

  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByRole("button", { name: "Sign in as operator" }).waitFor();
  service.kill("SIGTERM");
  expect(await service.exited).toBe(0);
}, 60_000);
