/** The admin API's audit log, newest first, for operators (the API refuses an account owner): who changed what, when and from where. */
import { api, query } from "../api";
import { h, table, when } from "../dom";

interface AuditPage {
  entries: Array<{ at: string; actor: string; actor_kind: string; action: string; target: string | null; address: string; detail: object }>;
  next_before: number | null;
}

export async function auditPage(root: HTMLElement): Promise<void> {
  const list = h("div");
  const older = h("button", { type: "button", class: "secondary" }, "Older entries");
  let before: string | undefined;
  const rows: string[][] = [];
  const load = async () => {
    const page = await api<AuditPage>("GET", `/audit${query({ before })}`);
    for (const entry of page.entries) rows.push([when(entry.at), `${entry.actor} (${entry.actor_kind})`, entry.action, entry.target ?? "—", entry.address, JSON.stringify(entry.detail)]);
    before = page.next_before?.toString();
    list.replaceChildren(table("Changes made through the admin API", ["At (UTC)", "Who", "Action", "Target", "From", "Detail"], rows));
    older.hidden = !before;
  };
  older.addEventListener("click", () => void load());
  root.append(list, older);
  await load();
}
