/** A small element builder: the console has no framework, only the DOM. */
type Child = Node | string | number | null | undefined | false;
type Props = Record<string, string | number | boolean | EventListener | undefined>;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === false) continue;
    if (typeof value === "function") element.addEventListener(name.replace(/^on/, ""), value);
    else if (value === true) element.setAttribute(name, "");
    else element.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    element.append(typeof child === "object" ? child : String(child));
  }
  return element;
}

/**
 * A table; on a narrow screen (console.css) each row becomes a card whose cells carry their
 * column's name, so no column is out of sight. The roles are explicit because a table shown
 * as blocks would otherwise lose them.
 */
export function table(caption: string, headings: string[], rows: Child[][], empty = "Nothing yet."): HTMLElement {
  if (rows.length === 0) return h("p", { class: "empty" }, `${caption}: ${empty}`);
  return h(
    "div",
    { class: "table-wrap", tabindex: 0, role: "region", "aria-label": caption },
    h(
      "table",
      { role: "table" },
      h("caption", {}, caption),
      h(
        "thead",
        { role: "rowgroup" },
        h(
          "tr",
          { role: "row" },
          ...headings.map((heading) => h("th", { scope: "col", role: "columnheader" }, heading)),
        ),
      ),
      h(
        "tbody",
        { role: "rowgroup" },
        ...rows.map((cells) =>
          h(
            "tr",
            { role: "row" },
            ...cells.map((cell, index) => h("td", { role: "cell", "data-label": headings[index] }, h("div", {}, cell))),
          ),
        ),
      ),
    ),
  );
}

// One way to write a time, the viewer's own (locale and time zone); the CSV keeps ISO 8601.
const instantFormat = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });
const dayFormat = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeZone: "UTC" });

/** An instant (ISO 8601 or epoch milliseconds), in a <time> that keeps the exact value. */
export function when(at: string | number | null): HTMLElement | string {
  if (at === null) return "—";
  const date = new Date(at);
  return h("time", { datetime: date.toISOString() }, instantFormat.format(date));
}

export const instant = (at: number) => instantFormat.format(at);

/** A UTC day (YYYY-MM-DD, as the usage report counts days), e.g. "Nov 25, 2026". */
export const day = (date: string) => dayFormat.format(Date.parse(`${date.slice(0, 10)}T00:00:00Z`));

/** A wall-clock time in a named zone: one with an offset is an instant shown there; one without is shown as written. */
export function wallClock(at: string, timeZone: string): HTMLElement {
  const offset = /(?:Z|[+-]\d\d:?\d\d)$/i.test(at);
  const date = new Date(offset ? at : `${at}Z`);
  const format = new Intl.DateTimeFormat(undefined, {
    dateStyle: "medium",
    timeStyle: "medium",
    timeZone: offset ? timeZone : "UTC",
  });
  return h("time", { datetime: at }, format.format(date));
}

export function field(label: string, input: HTMLInputElement | HTMLSelectElement): HTMLElement {
  const id = `f-${label.toLowerCase().replace(/\W+/g, "-")}-${Math.random().toString(36).slice(2, 7)}`;
  input.id = id;
  return h("div", { class: "field" }, h("label", { for: id }, label), input);
}

/** A status line that screen readers announce when it changes. */
export function notice(): HTMLElement {
  return h("p", { class: "notice", role: "status", "aria-live": "polite" });
}
