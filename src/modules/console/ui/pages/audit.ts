/** The audit log of the admin API, newest first, for operators: who changed what, when and from where. */
import { api, query } from "../api";
import { h, table, when } from "../dom";
import type { PageContext } from "../page";

interface AuditEntry {
  id: number;
  at: string;
  actor: string;
  actor_kind: string;
  action: string;
  target: string | null;
  address: string;
  detail: Record<string, unknown>;
}

const PAGE_SIZE = 50;

export async function auditPage(root: HTMLElement, context: PageContext): Promise<void> {
  if (context.session.kind !== "operator") {
    root.append(h("p", { class: "empty" }, "Only operators see the audit log."));
    return;
  }
  const list = h("div");
  const older = h("button", { type: "button", class: "secondary" }, "Older entries");
  let before: number | null = null;
  const rows: Array<Array<string>> = [];
  const load = async () => {
    const page = await api<{ entries: AuditEntry[]; next_before: number | null }>("GET", `/audit${query({ limit: String(PAGE_SIZE), before: before === null ? undefined : String(before) })}`);
    rows.push(
      ...page.entries.map((entry) => [when(entry.at), `${entry.actor} (${entry.actor_kind})`, entry.action, entry.target ?? "—", entry.address, JSON.stringify(entry.detail)]),
    );
    before = page.next_before;
    list.replaceChildren(table("Changes made through the admin API", ["At (UTC)", "Who", "Action", "Target", "From", "Detail"], rows, "none yet."));
    older.hidden = before === null;
  };
  older.addEventListener("click", () => void load());
  root.append(h("p", {}, "Every change made with an operator token or on the local socket (docs/admin-api.md)."), list, older);
  await load();
}
