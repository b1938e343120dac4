/**
 * A real Chromium (Debian's, with a fresh temporary profile that playwright
 * removes on close) driven by playwright-core, in which every address other than
 * loopback fails to resolve, so nothing a page does can depend on the internet.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";

export const ARTIFACTS = resolve(import.meta.dir, "../.artifacts");
/**
 * page.waitForFunction's options: the condition looked at every 50 ms. By default Playwright looks
 * at it on every animation frame, which keeps Chromium drawing frames (a renderer, the compositor,
 * the browser) as long as the wait lasts: three times the CPU of a page at rest.
 */
export const POLLED = { polling: 50 } as const;

/** A context's window unless the test gives one. */
export const DESKTOP = { width: 1280, height: 860 };
const AXE = readFileSync(Bun.resolveSync("axe-core/axe.min.js", import.meta.dir), "utf8");

export interface Chromium {
  browser: Browser;
  /**
   * A fresh context (its own cookies) whose outside requests, which cannot succeed,
   * are listed in `blocked`; a locale and time zone of the viewer's may be given.
   */
  context(
    viewport?: { width: number; height: number },
    viewer?: { locale?: string; timezoneId?: string },
  ): Promise<BrowserContext & { blocked: string[] }>;
  close(): Promise<void>;
}

const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]"]);

/**
 * Chromium's own resolver maps every host but loopback to nothing, addresses written as numbers
 * too: a page's requests, its sockets and the browser's own all fail before leaving the machine,
 * and no request waits on the test process to let it through.
 */
const ONLY_LOOPBACK = `MAP * ~NOTFOUND , ${[...LOOPBACK].map((host) => `EXCLUDE ${host}`).join(" , ")}`;

/**
 * Every window of this Chromium, headless too, loads the address bar's suggestion popups as
 * pages of their own, each in a renderer: about half a second of CPU for every context, for
 * something no test shows. And Chromium keeps a renderer started ahead for the next page of the
 * context last used, which a test's next page, in a context of its own, never uses: two renderers
 * started for every context instead of one, most of a second of CPU a context in the login test.
 * Chromium honours only the last --disable-features it is given and playwright passes a list of
 * its own, so a launcher adds these to that list.
 */
const UNSEEN_FEATURES = "WebUIOmniboxPopup,WebUIOmniboxAimPopup,SpareRendererForSitePerProcess";
const LAUNCHER = `#!/bin/sh
found=
for arg do
  shift
  case $arg in --disable-features=*) arg="$arg,${UNSEEN_FEATURES}" found=1 ;; esac
  set -- "$@" "$arg"
done
[ -n "$found" ] || set -- "$@" --disable-features=${UNSEEN_FEATURES}
exec /usr/bin/chromium "$@"
`;

export async function startChromium(): Promise<Chromium> {
  const folder = mkdtempSync(join(tmpdir(), "parley-chromium-"));
  const launcher = join(folder, "chromium");
  writeFileSync(launcher, LAUNCHER, { mode: 0o755 });
  // Once started, Chromium has no more use for the launcher: it runs its own binary from then on.
  const browser = await chromium
    .launch({
      executablePath: launcher,
      timeout: 20_000,
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        `--host-resolver-rules=${ONLY_LOOPBACK}`,
      ],
    })
    .finally(() => rmSync(folder, { recursive: true, force: true }));
  return {
    browser,
    async context(viewport = DESKTOP, viewer = {}) {
      const context = Object.assign(await browser.newContext({ viewport, ...viewer }), { blocked: [] as string[] });
      context.setDefaultTimeout(10_000);
      const tried = (address: string) => {
        const url = new URL(address);
        if (["http:", "https:", "ws:", "wss:"].includes(url.protocol) && !LOOPBACK.has(url.hostname))
          context.blocked.push(url.href);
      };
      context.on("request", (request) => tried(request.url()));
      context.on("page", (page) => page.on("websocket", (socket) => tried(socket.url())));
      return context;
    },
    async close() {
      await browser.close().catch(() => {});
    },
  };
}

/** axe-core's serious and critical violations on the page as it stands. */
export async function seriousViolations(page: Page): Promise<Array<{ id: string; impact: string; nodes: string[] }>> {
  // Evaluated rather than added as a script tag: the console's policy refuses inline scripts. Once a
  // document: the console moves between its pages without a reload, and axe.run starts afresh each time.
  if (!(await page.evaluate(() => "axe" in window))) await page.evaluate(AXE);
  const violations = await page.evaluate(async () => {
    const result = await (window as any).axe.run(document, { resultTypes: ["violations"] });
    return result.violations.map((v: any) => ({
      id: v.id,
      impact: v.impact,
      nodes: v.nodes.map((n: any) => n.target.join(" ")),
    }));
  });
  return violations.filter(
    (violation: { impact: string }) => violation.impact === "serious" || violation.impact === "critical",
  );
}

export async function screenshot(page: Page, name: string): Promise<string> {
  mkdirSync(ARTIFACTS, { recursive: true });
  const path = join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}

/**
 * What the browser's console would show as wrong while the page is used: errors logged,
 * uncaught exceptions, answers of 400 and above, and requests that failed (a request the page
 * itself cancelled, such as a live feed closed on leaving a page, is not a failure).
 */
export function watchProblems(page: Page): string[] {
  const problems: string[] = [];
  page.on("console", (message) => {
    if (message.type() === "error") problems.push(`console: ${message.text()}`);
  });
  page.on("pageerror", (error) => problems.push(`exception: ${error.message}`));
  page.on("response", (response) => {
    if (response.status() >= 400)
      problems.push(`${response.status()} ${response.request().method()} ${response.url()}`);
  });
  page.on("requestfailed", (request) => {
    if (request.failure()?.errorText !== "net::ERR_ABORTED")
      problems.push(`failed ${request.method()} ${request.url()}: ${request.failure()?.errorText}`);
  });
  return problems;
}

/**
 * The visible elements that matter (text cells, headings, fields, buttons, links, charts) lying
 * partly outside the viewport's width: on a phone, too, everything is in sight without scrolling sideways.
 */
export async function cutOff(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const width = document.documentElement.clientWidth;
    return [
      ...document.querySelectorAll(
        "header *, nav a, main :is(h1, h2, td, th, p, button, a, input, select, label, figure, dt, dd)",
      ),
    ]
      .filter((element) => !element.closest(".skip, thead"))
      .map((element) => ({ element, box: element.getBoundingClientRect() }))
      .filter(({ box }) => box.width > 0 && box.height > 0 && (box.left < -0.5 || box.right > width + 0.5))
      .map(
        ({ element, box }) =>
          `${element.tagName.toLowerCase()} "${(element.textContent ?? "").trim().slice(0, 40)}" ` +
          `(${Math.round(box.left)}–${Math.round(box.right)} of ${width})`,
      );
  });
}
