/** A small element builder: the console has no framework, only the DOM. */
type Child = Node | string | number | null | undefined | false;
type Props = Record<string, string | number | boolean | EventListener | undefined>;

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, props: Props = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
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

export function table(caption: string, headings: string[], rows: Child[][], empty = "Nothing yet."): HTMLElement {
  if (rows.length === 0) return h("p", { class: "empty" }, `${caption}: ${empty}`);
  return h(
    "div",
    { class: "table-wrap", tabindex: 0, role: "region", "aria-label": caption },
    h(
      "table",
      {},
      h("caption", {}, caption),
      h("thead", {}, h("tr", {}, ...headings.map((heading) => h("th", { scope: "col" }, heading)))),
      h("tbody", {}, ...rows.map((cells) => h("tr", {}, ...cells.map((cell) => h("td", {}, cell))))),
    ),
  );
}

export const when = (iso: string | null) => (iso ? new Date(iso).toISOString().replace("T", " ").slice(0, 19) : "—");

export function field(label: string, input: HTMLInputElement | HTMLSelectElement): HTMLElement {
  const id = `f-${label.toLowerCase().replace(/\W+/g, "-")}-${Math.random().toString(36).slice(2, 7)}`;
  input.id = id;
  return h("div", { class: "field" }, h("label", { for: id }, label), input);
}

/** A status line that screen readers announce when it changes. */
export function notice(): HTMLElement {
  return h("p", { class: "notice", role: "status", "aria-live": "polite" });
}
