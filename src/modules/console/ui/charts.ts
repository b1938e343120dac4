/** Time-series charts (uPlot). Each chart is kept by name on window.parleyCharts, so its data can be read back. */
import uPlot from "uplot";
import { day, h, instant } from "./dom";

declare global {
  interface Window {
    parleyCharts: Record<string, uPlot>;
  }
}
window.parleyCharts = {};

const COLOURS = ["#1f5fbf", "#b3400f", "#1d7a3a", "#7a2d91"];
const DAY_S = 86_400;
/** The least room a tick label needs, in pixels: fewer ticks rather than labels on top of each other. */
const TICK_SPACE = 64;
/** The y scale of a chart with nothing in it yet: a few whole units, not uPlot's 0–100. */
const EMPTY_MAX = 4;

export interface ChartSeries {
  label: string;
  values: number[];
}

const hourFormat = new Intl.DateTimeFormat(undefined, { hour: "numeric", minute: "2-digit" });
const tickDayFormat = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", timeZone: "UTC" });

/** Every k-th of the given times, k as small as leaves TICK_SPACE between labels. */
function spaced(u: uPlot, times: number[]): number[] {
  const step = Math.max(1, Math.ceil((times.length * TICK_SPACE) / Math.max(1, u.bbox.width / devicePixelRatio)));
  return times.filter((_time, index) => index % step === 0);
}

/**
 * A chart over unix-second times, sized to its container (so it fits a 390 px phone too).
 * `perDay`: one bar per UTC day, a tick per day; otherwise a line with hour ticks. The legend
 * shows the hovered point, and the last one while nothing is hovered.
 */
export function timeChart(
  name: string,
  title: string,
  times: number[],
  series: ChartSeries[],
  options: { perDay?: boolean; height?: number } = {},
): HTMLElement {
  const holder = h("figure", { class: "chart", "data-chart": name }, h("figcaption", {}, title));
  const total = (s: ChartSeries) => Math.round(s.values.reduce((a, b) => a + b, 0) * 100) / 100;
  const plotArea = h("div", {
    role: "img",
    "aria-label": `${title}: ${series.map((s) => `${s.label} total ${total(s)}`).join(", ")}`,
  });
  holder.append(plotArea);
  const last = times.length - 1;
  const showLast = (u: uPlot) => {
    if (u.cursor.idx === null || u.cursor.idx === undefined) u.setLegend({ idx: last }, false);
  };
  const draw = () => {
    window.parleyCharts[name]?.destroy();
    const width = Math.max(260, plotArea.clientWidth || holder.clientWidth || 600);
    window.parleyCharts[name] = new uPlot(
      {
        width,
        height: options.height ?? 180,
        series: [
          {
            label: options.perDay ? "Day" : "Time",
            value: (_u, at) =>
              at === null ? "" : options.perDay ? day(new Date(at * 1000).toISOString()) : instant(at * 1000),
          },
          ...series.map((s, index) => ({
            label: s.label,
            stroke: COLOURS[index % COLOURS.length],
            fill: options.perDay ? `${COLOURS[index % COLOURS.length]}33` : undefined,
            paths: options.perDay ? uPlot.paths.bars!({ size: [0.6, 40] }) : undefined,
          })),
        ],
        axes: [
          {
            space: TICK_SPACE,
            splits: options.perDay ? (u) => spaced(u, times) : undefined,
            values: (_u, splits) => splits.map((at) => (options.perDay ? tickDayFormat : hourFormat).format(at * 1000)),
          },
          { size: 40, incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 100_000, 1_000_000] },
        ],
        scales: {
          // Half a day either side, so the first and last bars are whole.
          x: {
            time: true,
            range: options.perDay ? () => [times[0]! - DAY_S / 2, times[last]! + DAY_S / 2] : undefined,
          },
          y: {
            range: (_u, _min, max) => [
              0,
              max > 0 ? Math.max(1, Math.ceil(uPlot.rangeNum(0, max, 0.1, true)[1] ?? max)) : EMPTY_MAX,
            ],
          },
        },
        hooks: { ready: [showLast], setCursor: [showLast] },
      },
      [times, ...series.map((s) => s.values)],
      plotArea,
    );
  };
  // Drawn once the figure is in the page and has a width.
  requestAnimationFrame(draw);
  return holder;
}

export function resetCharts(): void {
  for (const chart of Object.values(window.parleyCharts)) chart.destroy();
  window.parleyCharts = {};
}
