/**
 * One definition of participant minutes on every surface: the console's Usage page (header,
 * chart, table), its CSV download and the public report, in Chromium, over meetings with
 * closed stays and a stay still open. No cdr worker runs: every report folds what was
 * acknowledged before it was asked for. Each surface is checked against the definition at
 * its own as_of (an open stay counts up to it), and within one page load they agree.
 */
import { afterAll, beforeAll, expect, setDefaultTimeout, test } from "bun:test";
import { call, newAccount } from "../helpers";
import { POLLED } from "../support/browser";
import { type ConsoleUnderTest, startConsole } from "../support/console";
import { deliver, occupantJoined, occupantLeft, type Person, roomCreated, roomDestroyed } from "../support/event-sync";

setDefaultTimeout(30_000);

let ui: ConsoleUnderTest;
const operator = { name: `figures-${crypto.randomUUID().slice(0, 6)}`, password: "figures password" };

beforeAll(async () => {
  ui = await startConsole(operator);
});

afterAll(async () => {
  await ui?.stop();
});

const minutes = (seconds: number) => Math.round((seconds / 60) * 100) / 100;

test("Usage header, chart, table, CSV and API give the same participant minutes, open stays to as_of", async () => {
  const account = await newAccount();
  const now = Math.floor(Date.now() / 1000);
  // Inside today (UTC) whatever the hour, so every stay lies in one day of the page's window.
  const created = Math.max(now - (now % 86_400), now - 3600);
  const ann: Person = { name: "Ann", id: "ann", occupant_jid: "plan@meet.example.com/ann" };
  const bob: Person = { name: "Bob", id: "bob", occupant_jid: "plan@meet.example.com/bob" };
  const cy: Person = { name: "Cy", id: "cy", occupant_jid: "open@meet.example.com/cy" };
  const di: Person = { name: "Di", id: "di", occupant_jid: "open@meet.example.com/di" };
  for (const delivery of [
    roomCreated("plan", created),
    occupantJoined("plan", ann, created + 60, 1),
    occupantJoined("plan", bob, created + 60, 2),
    occupantLeft("plan", ann, created + 60, created + 660, 1),
    occupantLeft("plan", bob, created + 60, created + 960, 0),
    roomDestroyed("plan", created, created + 1000, []),
    // A meeting still running: Di has left, Cy is still in the room.
    roomCreated("open", created + 30),
    occupantJoined("open", cy, created + 40, 1),
    occupantJoined("open", di, created + 50, 2),
    occupantLeft("open", di, created + 50, created + 350, 1),
  ]) {
    expect((await deliver(account.apiKey, delivery)).status).toBe(200);
  }
  // Closed stays: Ann 600 s, Bob 900 s, Di 300 s; Cy's is open from created + 40.
  const openRoomSeconds = (asOf: string) => 300 + Math.round((Date.parse(asOf) - (created + 40) * 1000) / 1000);
  const expectedAt = (asOf: string) => minutes(600 + 900 + openRoomSeconds(asOf));

  const { context, page } = await ui.operatorPage();
  try {
    await page.getByLabel("Account").selectOption(account.accountId);
    await page.getByRole("link", { name: "Usage" }).click();
    await page.getByRole("table", { name: "Usage per day and room" }).waitFor();
    // The chart is drawn by a script of its own once the page is there: on a busy machine, after the table.
    await page.waitForFunction(() => window.parleyCharts?.["usage-minutes"] !== undefined, undefined, POLLED);
    const shown = await page.evaluate(() => {
      const plot = window.parleyCharts["usage-minutes"]!;
      const rows = [...document.querySelectorAll(`[aria-label="Usage per day and room"] tbody tr`)].map((row) =>
        [...row.querySelectorAll("td")].map((cell) => cell.textContent ?? ""),
      );
      return {
        header: document.querySelector(".usage .totals")!.textContent!,
        definition: document.querySelector(".usage .definition")!.textContent!,
        asOf: document.querySelector<HTMLElement>(".usage .definition")!.dataset.asOf!,
        bars: Array.from(plot.data[1] as ArrayLike<number>),
        rows,
      };
    });
    const total = expectedAt(shown.asOf);
    // The header: the report's totals, and what they count.
    expect(shown.header).toContain(`2 meetings · ${total} participant`);
    expect(shown.definition).toContain("1 stay still open is counted up to");
    // The table: one row per room of today, Ann and Bob in plan, Cy and Di in open.
    const tableMinutes = shown.rows.map((cells) => Number(cells[2]));
    expect(tableMinutes.sort((a, b) => a - b)).toEqual(
      [minutes(600 + 900), minutes(openRoomSeconds(shown.asOf))].sort((a, b) => a - b),
    );
    // The chart: today's bar is the sum of today's rows, and the bars add up to the header.
    const bars = shown.bars.filter((value) => value > 0);
    expect(bars).toHaveLength(1);
    expect(Math.abs(bars[0]! - total)).toBeLessThanOrEqual(0.01);

    // The CSV download: each stay's minutes, the open one up to the CSV's own as_of.
    const csv = await page.evaluate(async () =>
      (await fetch(document.querySelector<HTMLAnchorElement>("a[download]")!.href)).text(),
    );
    const [head, ...lines] = csv.trimEnd().split("\r\n");
    const columns = head!.split(",");
    const records = lines.map((line) =>
      Object.fromEntries(line.split(",").map((value, index) => [columns[index], value])),
    );
    expect(records.map((record) => [record.user_id, record.left_at === ""]).sort()).toEqual([
      ["ann", false],
      ["bob", false],
      ["cy", true],
      ["di", false],
    ]);
    const csvAsOf = records[0]!.as_of!;
    const csvSum = records.reduce((sum, record) => sum + Number(record.user_minutes), 0);
    expect(Math.abs(csvSum - expectedAt(csvAsOf))).toBeLessThanOrEqual(0.005 * records.length);

    // The public report: totals, rooms and days alike.
    const report = (
      await call("POST", "/api/v1/pricing/cdr", { body: {}, headers: { authorization: `Bearer ${account.apiKey}` } })
    ).body;
    const apiTotal = expectedAt(report.as_of);
    expect(report.totals).toMatchObject({ rooms: 2, participant_minutes: apiTotal, open_stays: 1 });
    const roomSum = report.rooms.reduce((sum: number, room: any) => sum + room.media_usage.participant_minutes, 0);
    const daySum = report.days.reduce((sum: number, day: any) => sum + day.participant_minutes, 0);
    expect(Math.abs(roomSum - apiTotal)).toBeLessThanOrEqual(0.01);
    expect(Math.abs(daySum - apiTotal)).toBeLessThanOrEqual(0.01);
  } finally {
    await context.close();
  }
});
