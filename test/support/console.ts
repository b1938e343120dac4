/**
 * The console as the browser tests use it: the app listening on a free loopback port, an
 * operator to sign in as, and Chromium.
 */
import type { Page } from "playwright-core";
import { createOperator } from "../../src/modules/operators/service";
import { app } from "../helpers";
import { type Chromium, DESKTOP, startChromium } from "./browser";

export interface Operator {
  name: string;
  password: string;
}

export interface ConsoleUnderTest {
  base: string;
  chromium: Chromium;
  /** Fills in the sign-in form and submits it; what follows is the caller's to check. */
  signIn(page: Page, password?: string, name?: string): Promise<void>;
  /** A fresh browser context whose page is signed in as the operator, on the overview. */
  operatorPage(viewport?: {
    width: number;
    height: number;
  }): Promise<{ context: Awaited<ReturnType<Chromium["context"]>>; page: Page }>;
  /**
   * The operator's signed-in page that a file's tests share, at 1280 px and loaded afresh on the
   * overview for each. Closed with the console, not by the test.
   */
  sharedOperatorPage(): Promise<{ context: Awaited<ReturnType<Chromium["context"]>>; page: Page }>;
  stop(): Promise<void>;
}

export async function startConsole(operator: Operator): Promise<ConsoleUnderTest> {
  app.listen({ port: 0, hostname: "127.0.0.1" });
  const base = `http://127.0.0.1:${app.server!.port}`;
  await createOperator(operator.name, operator.password);
  const chromium = await startChromium();
  const signIn = async (page: Page, password = operator.password, name = operator.name) => {
    await page.goto(`${base}/console`);
    await page.getByLabel("Name").fill(name);
    await page.getByLabel("Password").fill(password);
    await page.getByRole("button", { name: "Sign in as operator" }).click();
  };
  const operatorPage = async (viewport?: { width: number; height: number }) => {
    const context = await chromium.context(viewport);
    const page = await context.newPage();
    await signIn(page);
    await page.locator("[data-figure=rooms_open]").waitFor();
    return { context, page };
  };
  /*
   * A context of its own and a sign-in cost Chromium about 2 s of CPU (a renderer started, the
   * console loaded twice over); loading the console again in the signed-in page, a fifth of that.
   */
  let shared: ReturnType<typeof operatorPage> | undefined;
  return {
    base,
    chromium,
    signIn,
    operatorPage,
    async sharedOperatorPage() {
      const open = await shared?.catch(() => undefined);
      if (!open || open.page.isClosed()) {
        shared = operatorPage();
        return shared;
      }
      // A new document, whatever the last test left: no hash, so the overview, as after a sign-in.
      await open.page.setViewportSize(DESKTOP);
      await open.page.goto(`${base}/console`);
      await open.page.locator("[data-figure=rooms_open]").waitFor();
      return open;
    },
    async stop() {
      await chromium.close();
      await app.stop(true);
    },
  };
}
