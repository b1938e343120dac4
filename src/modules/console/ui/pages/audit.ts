/**
 * The admin API's audit log, newest first, for operators (the API
 * refuses an account owner): who changed what, when and from where.
 */
import { api } from "../api";
import { h, table, when } from "../dom";

export async function auditPage(root: HTMLElement): Promise<void> {
  const list = h("div");
  const older = h("button", { type: "button", class: "secondary" }, "Older entries");
  let before: number | undefined;
  const rows: Array<Array<string | HTMLElement>> = [];
  const load = async () => {
    const page = await api("get", "/audit", { query: { before } });
    for (const entry of page.entries)
      rows.push([
        when(entry.at),
        `${entry.actor} (${entry.actor_kind})`,
        entry.action,
        entry.target ?? "—",
        entry.address,
        h("code", { class: "detail" }, JSON.stringify(entry.detail)),
      ]);
    before = page.next_before ?? undefined;
    list.replaceChildren(
      table("Changes made through the admin API", ["At", "Who", "Action", "Target", "From", "Detail"], rows),
    );
    older.hidden = before === undefined;
  };
  older.addEventListener("click", () => void load());
  root.append(list, older);
  await load();
}
