/** Usage per day and room over a chosen window: the usage report's own figures, as charts, a table and CSV. */
import { roomLabel } from "../../../../core/room-key";
import { api, query } from "../api";
import { timeChart } from "../charts";
import { day as dayLabel, field, h, table, when } from "../dom";
import type { PageContext } from "../page";

const KINDS = [
  ["participant_minutes", "Participant"],
  ["phone_minutes", "Phone"],
  ["streaming_minutes", "Streaming"],
  ["recording_minutes", "Recording"],
] as const;

const dayOf = (date: Date) => date.toISOString().slice(0, 10);

export async function usagePage(root: HTMLElement, context: PageContext): Promise<void> {
  const today = new Date();
  const start = h("input", { type: "date", name: "start", value: dayOf(new Date(today.getTime() - 6 * 86_400_000)) });
  const end = h("input", { type: "date", name: "end", value: dayOf(today) });
  const results = h("div", { class: "usage" });
  const csv = h("a", { class: "button", download: "" }, "Download CSV");
  const show = async () => {
    // The end day is included whole.
    const window = {
      account: context.account,
      start: start.value,
      end: end.value ? `${end.value}T23:59:59Z` : undefined,
    };
    csv.setAttribute("href", `/console/api/usage.csv${query(window)}`);
    const report = await api("get", "/usage", { query: window });
    // Every day of the window is a bar, the empty ones too, so the axis spans the window asked
    // for, and the days a listed meeting ran on past its end, so the bars add up to the header.
    const last = report.days.reduce(
      (latest, day) => Math.max(latest, Date.parse(day.date)),
      Date.parse(report.end_date),
    );
    const dates: string[] = [];
    for (let day = Date.parse(report.start_date.slice(0, 10)); day <= last; day += 86_400_000)
      dates.push(dayOf(new Date(day)));
    const sum = (date: string, kind: (typeof KINDS)[number][0]) =>
      Math.round(report.days.filter((day) => day.date === date).reduce((total, day) => total + day[kind], 0) * 100) /
      100;
    results.replaceChildren(
      h(
        "p",
        { class: "totals" },
        `${report.totals.rooms} ${report.totals.rooms === 1 ? "meeting" : "meetings"} · ` +
          `${report.totals.participant_minutes} participant, ${report.totals.phone_minutes} phone, ` +
          `${report.totals.streaming_minutes} streaming and ${report.totals.recording_minutes} recording minutes`,
      ),
      // What the figures count, in the words of the report's definition (docs/usage.md).
      h(
        "p",
        { class: "definition", "data-as-of": report.as_of },
        `Participant minutes: every stay in the meetings that started in this window, to the leave; ${
          report.totals.open_stays === 0
            ? "none is still open, as of"
            : report.totals.open_stays === 1
              ? "1 stay still open is counted up to"
              : `${report.totals.open_stays} stays still open are counted up to`
        } `,
        when(report.as_of),
        ". Chart, table and CSV count the same stays.",
      ),
      timeChart(
        "usage-minutes",
        "Minutes per day",
        dates.map((date) => Date.parse(`${date}T00:00:00Z`) / 1000),
        KINDS.map(([kind, label]) => ({ label, values: dates.map((date) => sum(date, kind)) })),
        { perDay: true, height: 220 },
      ),
      table(
        "Usage per day and room",
        ["Day", "Room", "Participant min", "Phone min", "Streaming min", "Recording min", "Peak participants"],
        report.days.map((day) => [
          dayLabel(day.date),
          roomLabel(day.room_name),
          day.participant_minutes,
          day.phone_minutes,
          day.streaming_minutes,
          day.recording_minutes,
          day.peak_participants,
        ]),
        "no usage in this window.",
      ),
    );
  };
  const form = h(
    "form",
    {
      class: "inline",
      onsubmit: (event: Event) => {
        event.preventDefault();
        void show();
      },
    },
    field("From", start),
    field("To", end),
    h("button", { type: "submit" }, "Show"),
    csv,
  );
  root.append(form, results);
  await show();
}
