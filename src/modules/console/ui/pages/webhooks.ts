/**
 * The account's webhook endpoints (create, enable or disable, set or lift their delivery limits,
 * delete, rotate the secret, which is shown once). Deliveries opens one endpoint's delivery log
 * beneath them, webhook-log.ts.
 */
import { type Answer, api } from "../api";
import { field, h, notice, table, when } from "../dom";
import type { PageContext } from "../page";
import { deliveryLog } from "./webhook-log";

type Listing = Answer<"get", "/webhooks">;
type Endpoint = Listing["endpoints"][number];

/** An endpoint's rate and concurrency limits in a line; "none" when it has neither. */
function limitsOf(endpoint: Endpoint): string {
  const limits = [
    endpoint.rate_per_second === null
      ? ""
      : `${endpoint.rate_per_second}/s (burst ${endpoint.rate_burst ?? Math.ceil(endpoint.rate_per_second)})`,
    endpoint.max_in_flight === null ? "" : `${endpoint.max_in_flight} in flight`,
  ].filter(Boolean);
  return limits.length > 0 ? limits.join(", ") : "none";
}

/**
 * The three limit fields, as the new-endpoint form and the limits editor both show them; empty is
 * no limit, as the API's null.
 */
function limitFields(endpoint?: Endpoint) {
  const input = (name: string, min: string, max: string, step: string, value: number | null | undefined) =>
    h("input", { name, type: "number", min, max, step, value: value === null ? undefined : value });
  const rate = input("rate_per_second", "0.01", "10000", "any", endpoint?.rate_per_second);
  const burst = input("rate_burst", "1", "10000", "1", endpoint?.rate_burst);
  const maxInFlight = input("max_in_flight", "1", "1000", "1", endpoint?.max_in_flight);
  const limit = (field: HTMLInputElement) => (field.value === "" ? null : Number(field.value));
  return {
    fields: [
      field("Rate (deliveries a second; empty: no limit)", rate),
      field("Burst (empty: the rate rounded up)", burst),
      field("Attempts in flight at most (1: serial; empty: no limit)", maxInFlight),
    ],
    values: () => ({ rate_per_second: limit(rate), rate_burst: limit(burst), max_in_flight: limit(maxInFlight) }),
  };
}

export async function webhooksPage(root: HTMLElement, context: PageContext): Promise<void> {
  const account = context.account!;
  const status = notice();
  const secret = h("div", { class: "secret", "aria-live": "polite" });
  const list = h("div");
  const editor = h("section", { "aria-label": "Delivery limits" });
  let endpoints: Endpoint[] = [];
  let editing: string | undefined;

  const showSecret = (what: string, value: string) => {
    secret.replaceChildren(
      h("p", {}, `${what}. Copy it now: it is never shown again.`),
      h("output", { class: "key", "data-new-secret": "" }, value),
    );
  };
  /** Runs an action, saying what it does and then how it went (its own words, if it has some). */
  const act = async (describe: string, action: () => Promise<unknown>) => {
    status.textContent = `${describe}…`;
    try {
      const outcome = await action();
      status.textContent = `${describe}: ${typeof outcome === "string" ? outcome : "done."}`;
    } catch (error) {
      status.textContent = `${describe}: ${error instanceof Error ? error.message : String(error)}`;
    }
  };
  const log = deliveryLog({
    account,
    status,
    act,
    endpoint: (id) => endpoints.find((candidate) => candidate.id === id),
    loadEndpoints: () => loadEndpoints(),
    onLeave: (cleanup) => context.onLeave(cleanup),
  });

  const loadEndpoints = async (listing?: Listing) => {
    ({ endpoints } = listing ?? (await api("get", "/webhooks", { query: { account } })));
    list.replaceChildren(
      table(
        "Endpoints",
        ["URL", "Events", "State", "Ordered", "Limits", "Actions"],
        endpoints.map((endpoint) => [
          h(
            "span",
            { class: "url" },
            endpoint.url,
            endpoint.description ? h("br") : null,
            endpoint.description ? h("small", {}, endpoint.description) : null,
          ),
          endpoint.event_types === null ? "all" : endpoint.event_types.join(", ") || "none",
          h(
            "span",
            { "data-endpoint-state": endpoint.id },
            endpoint.enabled
              ? endpoint.circuit_open_until
                ? h("span", {}, "enabled; circuit open, probed after ", when(endpoint.circuit_open_until))
                : endpoint.failing_since
                  ? h("span", {}, "enabled; failing since ", when(endpoint.failing_since))
                  : "enabled"
              : `disabled${endpoint.disabled_reason ? `: ${endpoint.disabled_reason}` : ""}`,
          ),
          endpoint.ordered ? "yes" : "no",
          limitsOf(endpoint),
          h(
            "span",
            { class: "actions" },
            h(
              "button",
              {
                type: "button",
                "aria-label": `Deliveries of ${endpoint.url}`,
                "aria-pressed": String(log.isOpen(endpoint.id)),
                onclick: () => void log.open(endpoint.id),
              },
              "Deliveries",
            ),
            h(
              "button",
              {
                type: "button",
                class: "secondary",
                "aria-label": `Limits of ${endpoint.url}`,
                "aria-pressed": String(editing === endpoint.id),
                onclick: () => void editLimits(endpoint.id),
              },
              "Limits",
            ),
            h(
              "button",
              {
                type: "button",
                class: "secondary",
                "aria-label": `${endpoint.enabled ? "Disable" : "Enable"} ${endpoint.url}`,
                onclick: () =>
                  void act(`${endpoint.enabled ? "Disabling" : "Enabling"} ${endpoint.url}`, async () => {
                    await api("patch", "/webhooks/:id", {
                      params: { id: endpoint.id },
                      body: { account, enabled: !endpoint.enabled },
                    });
                    await loadEndpoints();
                  }),
              },
              endpoint.enabled ? "Disable" : "Enable",
            ),
            h(
              "button",
              {
                type: "button",
                class: "secondary",
                "aria-label": `Rotate secret of ${endpoint.url}`,
                onclick: () =>
                  void act(`Rotating the secret of ${endpoint.url}`, async () => {
                    const rotated = await api("post", "/webhooks/:id/rotate-secret", {
                      params: { id: endpoint.id },
                      body: { account },
                    });
                    showSecret(
                      `New secret of ${endpoint.url}; the old one keeps signing beside it for 24 hours`,
                      rotated.secret,
                    );
                  }),
              },
              "Rotate secret",
            ),
            h(
              "button",
              {
                type: "button",
                class: "danger",
                "aria-label": `Delete ${endpoint.url}`,
                onclick: () =>
                  void act(`Deleting ${endpoint.url}`, async () => {
                    await api("delete", "/webhooks/:id", { params: { id: endpoint.id }, query: { account } });
                    if (log.isOpen(endpoint.id)) log.close();
                    if (editing === endpoint.id) closeEditor();
                    await loadEndpoints();
                  }),
              },
              "Delete",
            ),
          ),
        ]),
        "no endpoints yet.",
      ),
    );
  };

  const closeEditor = () => {
    editing = undefined;
    editor.replaceChildren();
  };

  /** The endpoint's limits in a form filled with what it has now; saving sends all three, empty ones as none. */
  const editLimits = async (id: string) => {
    editing = id;
    await loadEndpoints();
    const endpoint = endpoints.find((candidate) => candidate.id === id);
    if (!endpoint) {
      closeEditor();
      return;
    }
    const limits = limitFields(endpoint);
    const heading = h("h2", { tabindex: -1 }, `Limits of ${endpoint.url}`);
    const save = (values: ReturnType<typeof limits.values>) =>
      act(`Setting the limits of ${endpoint.url}`, async () => {
        const updated = await api("patch", "/webhooks/:id", {
          params: { id: endpoint.id },
          body: { account, ...values },
        });
        // The form filled again with what the endpoint now has; editLimits reads the list afresh.
        if (editing === endpoint.id) await editLimits(endpoint.id);
        else await loadEndpoints();
        return `${limitsOf(updated)}.`;
      });
    editor.replaceChildren(
      heading,
      h(
        "form",
        {
          id: "edit-limits",
          onsubmit: (event: Event) => {
            event.preventDefault();
            void save(limits.values());
          },
        },
        ...limits.fields,
        h("button", { type: "submit" }, "Save limits"),
        h(
          "button",
          {
            type: "button",
            class: "secondary",
            onclick: () => void save({ rate_per_second: null, rate_burst: null, max_in_flight: null }),
          },
          "No limits",
        ),
        h("button", { type: "button", class: "secondary", onclick: () => closeEditor() }, "Close"),
      ),
    );
    heading.focus();
  };

  const url = h("input", {
    name: "url",
    type: "url",
    required: true,
    maxlength: 2048,
    placeholder: "https://example.com/parley-hook",
  });
  const description = h("input", { name: "description", maxlength: 1024 });
  const ordered = h("input", { name: "ordered", type: "checkbox" });
  const newLimits = limitFields();
  const first = await api("get", "/webhooks", { query: { account } });
  const typeBoxes = first.event_types.map((type) => h("input", { type: "checkbox", name: "event_types", value: type }));
  const form = h(
    "form",
    {
      id: "create-endpoint",
      onsubmit: (event: Event) => {
        event.preventDefault();
        void act(`Adding ${url.value}`, async () => {
          const picked = first.event_types.filter((_type, index) => typeBoxes[index]!.checked);
          const created = await api("post", "/webhooks", {
            body: {
              account,
              url: url.value,
              description: description.value,
              ordered: ordered.checked,
              ...newLimits.values(),
              // None ticked is every type, as the API's null.
              event_types: picked.length > 0 ? picked : null,
            },
          });
          showSecret(`Signing secret of ${created.endpoint.url}`, created.secret);
          form.reset();
          await loadEndpoints();
        });
      },
    },
    field("Endpoint URL", url),
    field("Description", description),
    h("div", { class: "field check" }, h("label", {}, ordered, " Ordered (one event at a time, in sequence)")),
    ...newLimits.fields,
    h(
      "details",
      { class: "types" },
      h("summary", {}, "Event types (none ticked: every type)"),
      h(
        "fieldset",
        {},
        h("legend", {}, "Send only these event types"),
        ...typeBoxes.map((box) => h("label", {}, box, ` ${box.value}`)),
      ),
    ),
    h("button", { type: "submit" }, "Add endpoint"),
  );
  root.append(h("h2", {}, "New endpoint"), form, status, secret, list, editor, log.element);
  await loadEndpoints(first);
}
