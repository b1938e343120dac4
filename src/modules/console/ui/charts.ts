/** Time-series charts (uPlot). Each chart is kept by name on window.parleyCharts, so its data can be read back. */
import uPlot from "uplot";
import { h } from "./dom";

declare global {
  interface Window {
    parleyCharts: Record<string, uPlot>;
  }
}
window.parleyCharts = {};

const COLOURS = ["#1f5fbf", "#b3400f", "#1d7a3a", "#7a2d91"];

export interface ChartSeries {
  label: string;
  values: number[];
}

/** A chart over unix-second times, sized to its container (so it fits a 390 px phone too). */
export function timeChart(name: string, title: string, times: number[], series: ChartSeries[], options: { bars?: boolean; height?: number } = {}): HTMLElement {
  const holder = h("figure", { class: "chart", "data-chart": name }, h("figcaption", {}, title));
  const plotArea = h("div", { role: "img", "aria-label": `${title}: ${series.map((s) => `${s.label} total ${Math.round(s.values.reduce((a, b) => a + b, 0) * 100) / 100}`).join(", ")}` });
  holder.append(plotArea);
  const draw = () => {
    window.parleyCharts[name]?.destroy();
    const width = Math.max(260, plotArea.clientWidth || holder.clientWidth || 600);
    window.parleyCharts[name] = new uPlot(
      {
        width,
        height: options.height ?? 180,
        series: [
          {},
          ...series.map((s, index) => ({
            label: s.label,
            stroke: COLOURS[index % COLOURS.length],
            fill: options.bars ? `${COLOURS[index % COLOURS.length]}33` : undefined,
            paths: options.bars ? uPlot.paths.bars!({ size: [0.6, 40] }) : undefined,
          })),
        ],
        axes: [{}, { size: 40 }],
        scales: { x: { time: true } },
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
