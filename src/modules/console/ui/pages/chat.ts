/** Chat rooms and their latest messages; the console deletes as a moderator. */
import { api, query } from "../api";
import { field, h, notice, table, when } from "../dom";
import type { PageContext } from "../page";

export async function chatPage(root: HTMLElement, context: PageContext): Promise<void> {
  const rooms = await api<Array<{ channel_id: string; status: string; created_by: string; created_at: string }>>("GET", `/chat/rooms${query({ account: context.account })}`);
  const status = notice();
  const messages = h("div");
  const picker = h("select", { name: "channel" }, ...rooms.map((room) => h("option", { value: room.channel_id }, room.channel_id)));
  const show = async () => {
    const channel = picker.value;
    if (!channel) return;
    const list = await api<{ messages: Array<{ id: number; content: string; user?: { name?: string; user_id?: string }; created_at: string }> }>(
      "GET",
      `/chat/messages${query({ account: context.account, channel })}`,
    );
    messages.replaceChildren(
      table(
        `Latest messages in ${channel}`,
        ["Id", "When (UTC)", "From", "Message", "Actions"],
        list.messages.map((message) => [
          message.id,
          when(message.created_at),
          message.user?.name || message.user?.user_id || "—",
          message.content,
          h("button", { type: "button", class: "danger", onclick: async () => {
            const answer = await api<{ message: string }>("POST", "/chat/delete", { account: context.account, channel, message_ids: [message.id] });
            await show();
            status.textContent = answer.message;
          } }, `Delete message ${message.id}`),
        ]),
        "no messages.",
      ),
    );
  };
  picker.addEventListener("change", () => void show());
  root.append(
    table("Chat rooms", ["Room", "Status", "Created by", "Created (UTC)"], rooms.map((room) => [room.channel_id, room.status, room.created_by, when(room.created_at)]), "no chat rooms."),
    ...(rooms.length > 0 ? [h("div", { class: "inline" }, field("Room", picker))] : []),
    status,
    messages,
  );
  await show();
}
