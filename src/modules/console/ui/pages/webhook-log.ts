/**
 * One webhook endpoint's delivery log on the Webhooks page: its deliveries with Retry on each,
 * the Replay form, and the refresh that keeps the open log current so a delivery shows up and
 * changes state without a click. Apart from webhooks.ts because it keeps state of its own (which
 * log is open, its timer, what is shown) that the endpoint list only opens, closes and asks about.
 */
import { type Answer, api } from "../api";
import { field, h, table, when } from "../dom";

type Endpoint = Answer<"get", "/webhooks">["endpoints"][number];
type Delivery = Answer<"get", "/webhooks/:id/deliveries">["deliveries"][number];

/** How often an open delivery log asks for news. */
const LOG_REFRESH_MS = 1_500;
/** How much of a receiver's answer the table shows; the full first kilobyte is in the cell's title. */
const ANSWER_CHARS = 80;

/** What the log takes from the page it sits in. */
export interface DeliveryLogPage {
  account: string;
  /** The page's status line, where a log that could not be read says so. */
  status: HTMLElement;
  /** Runs an action, saying on the status line what it does and then how it went. */
  act(describe: string, action: () => Promise<unknown>): Promise<void>;
  /** The endpoint as the page's list last read it; undefined once it is gone from there. */
  endpoint(id: string): Endpoint | undefined;
  /** Reads and draws the endpoint list again, so its Deliveries buttons show the open log. */
  loadEndpoints(): Promise<void>;
  onLeave(cleanup: () => void): void;
}

/** The delivery log's section, and how the endpoint list opens, closes and asks about it. */
export function deliveryLog(page: DeliveryLogPage) {
  const { account, status, act } = page;
  const log = h("section", { "aria-label": "Delivery log" });
  let open: string | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let left = false;
  page.onLeave(() => {
    left = true;
    clearTimeout(timer);
  });

  // The log's rows, kept apart from its replay form so a refresh never disturbs typing there.
  const rows = h("div", { "aria-live": "off" });
  let shown = "";
  const renderDeliveries = (endpoint: Endpoint, deliveries: Delivery[]) => {
    const snapshot = JSON.stringify(deliveries);
    if (snapshot === shown) return;
    shown = snapshot;
    // A refresh keeps the keyboard where it was: on the same delivery's Retry button.
    const focused = (document.activeElement as HTMLElement | null)?.dataset?.retry;
    rows.replaceChildren(
      table(
        `Deliveries to ${endpoint.url}`,
        ["Event", "Status", "Attempts", "Code", "Latency", "Answer", "Last attempt", "Next retry", "Actions"],
        deliveries.map((delivery) => [
          h(
            "span",
            {},
            delivery.event_type,
            h("br"),
            h("small", {}, `#${delivery.sequence} `, h("code", {}, delivery.event_id)),
          ),
          h("span", { class: `state state-${delivery.status}`, "data-delivery-status": delivery.id }, delivery.status),
          delivery.attempts,
          h("span", { "data-delivery-code": delivery.id }, delivery.status_code ?? "—"),
          delivery.latency_ms === null ? "—" : `${delivery.latency_ms} ms`,
          delivery.response === null
            ? "—"
            : h(
                "span",
                { class: "answer", title: delivery.response },
                delivery.response.length > ANSWER_CHARS
                  ? `${delivery.response.slice(0, ANSWER_CHARS)}…`
                  : delivery.response,
              ),
          when(delivery.last_attempt_at),
          when(delivery.next_attempt_at),
          h(
            "button",
            {
              type: "button",
              class: "secondary",
              "data-retry": delivery.id,
              onclick: () =>
                void act(`Retrying delivery ${delivery.id}`, async () => {
                  await api("post", "/webhooks/:id/deliveries/:delivery/retry", {
                    params: { id: endpoint.id, delivery: delivery.id },
                    body: { account },
                  });
                  await refreshLog();
                }),
            },
            `Retry delivery ${delivery.id}`,
          ),
        ]),
        "no deliveries yet.",
      ),
    );
    if (focused) rows.querySelector<HTMLElement>(`[data-retry="${focused}"]`)?.focus();
  };

  const refreshLog = async () => {
    clearTimeout(timer);
    const endpoint = open === undefined ? undefined : page.endpoint(open);
    if (!endpoint || left) return;
    try {
      const { deliveries } = await api("get", "/webhooks/:id/deliveries", {
        params: { id: endpoint.id },
        query: { account },
      });
      if (open === endpoint.id && !left) renderDeliveries(endpoint, deliveries);
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      status.textContent = `The delivery log could not be read: ${reason}`;
    }
    if (open === endpoint.id && !left) timer = setTimeout(() => void refreshLog(), LOG_REFRESH_MS);
  };

  const closeLog = () => {
    open = undefined;
    clearTimeout(timer);
    log.replaceChildren();
  };

  const openLog = async (id: string) => {
    open = id;
    shown = "";
    const endpoint = page.endpoint(id)!;
    const after = h("input", { name: "after", type: "number", min: 0, inputmode: "numeric" });
    const since = h("input", { name: "since", type: "datetime-local", step: 1 });
    const heading = h("h2", { tabindex: -1 }, `Delivery log of ${endpoint.url}`);
    log.replaceChildren(
      heading,
      h(
        "form",
        {
          class: "inline",
          id: "replay",
          onsubmit: (event: Event) => {
            event.preventDefault();
            void act(`Replaying to ${endpoint.url}`, async () => {
              // A datetime-local field holds the browser's local time; the service takes an instant.
              const from =
                after.value !== ""
                  ? { after: Number(after.value) }
                  : since.value !== ""
                    ? { since: new Date(since.value).toISOString() }
                    : {};
              const { queued } = await api("post", "/webhooks/:id/replay", {
                params: { id: endpoint.id },
                body: { account, ...from },
              });
              await refreshLog();
              return `${queued} ${queued === 1 ? "delivery" : "deliveries"} queued.`;
            });
          },
        },
        field("Replay after sequence", after),
        field("or since (local time)", since),
        h("button", { type: "submit" }, "Replay"),
      ),
      rows,
    );
    rows.replaceChildren();
    await page.loadEndpoints();
    await refreshLog();
    heading.focus();
  };

  return { element: log, open: openLog, close: closeLog, isOpen: (id: string) => open === id };
}
