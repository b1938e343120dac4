/**
 * A console page whose live feed is refused by the cap on feeds per session (docs/limits.md#caps),
 * in Chromium: it neither reloads over and over nor sends its viewer to the sign-in, and its
 * feed opens once another page of the session closes. A session that ends still sends the
 * page with a feed back to the sign-in.
 */
import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { eq } from "drizzle-orm";
import { overrideConfig } from "../../src/core/config";
import { db } from "../../src/db/client";
import { consoleSessions } from "../../src/modules/console/schema";
import { operators } from "../../src/modules/operators/schema";
import { type ConsoleUnderTest, startConsole } from "../support/console";
import { until } from "../support/wait";

setDefaultTimeout(60_000);

let ui: ConsoleUnderTest;
let restore: () => void;
const operator = { name: `feeds-${crypto.randomUUID().slice(0, 6)}`, password: "feeds password" };

beforeAll(async () => {
  restore = overrideConfig({ limits: { held: { consoleFeedsPerSession: 1 } } });
  ui = await startConsole(operator);
});

afterAll(async () => {
  await ui.stop();
  restore();
});

test("a page past the session's cap on feeds waits for a free slot, without reloading", async () => {
  const { context, page: first } = await ui.operatorPage();
  try {
    // A second tab of the same session: its feed is refused with 429 while the first holds the one slot.
    const second = await context.newPage();
    let loads = 0;
    const feeds: number[] = [];
    second.on("load", () => loads++);
    second.on("response", (response) => {
      if (new URL(response.url()).pathname === "/console/api/live") feeds.push(response.status());
    });
    await second.goto(`${ui.base}/console`);
    expect(
      await until(
        () => feeds.length,
        (n) => n >= 1,
      ),
    ).toBeGreaterThanOrEqual(1);
    expect(feeds[0]).toBe(429);
    // Two seconds on, the page is the one loaded, still signed in, and has not asked again.
    await Bun.sleep(2_000);
    expect(loads).toBe(1);
    expect(feeds).toEqual([429]);
    expect(await second.getByLabel("Password").count()).toBe(0);

    // The first tab goes: the second opens its feed on its next try, within its 5 s wait.
    await first.close();
    expect(
      await until(
        () => feeds.at(-1),
        (status) => status === 200,
        10_000,
      ),
    ).toBe(200);
    await second.locator("[data-figure=rooms_open]").waitFor();
    expect(loads).toBe(1);

    // The operator's session ends: the feed notices, and the page shows the sign-in.
    const [me] = await db.select().from(operators).where(eq(operators.name, operator.name));
    await db.update(consoleSessions).set({ revokedAt: new Date() }).where(eq(consoleSessions.operatorId, me!.id));
    await second.getByLabel("Password").waitFor({ timeout: 20_000 });
  } finally {
    await context.close();
  }
});
