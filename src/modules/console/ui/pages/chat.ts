/** Chat rooms and their latest messages; the console deletes as a moderator. */
import { api } from "../api";
import { field, h, notice, table, when } from "../dom";
import type { PageContext } from "../page";

/** Rooms looked into for one with messages when the page opens: a bound on the requests an opening costs. */
const ROOMS_LOOKED_INTO = 10;

export async function chatPage(root: HTMLElement, context: PageContext): Promise<void> {
  const rooms = await api("get", "/chat/rooms", { query: { account: context.account } });
  const status = notice();
  const messages = h("div");
  const picker = h(
    "select",
    { name: "channel" },
    ...rooms.map((room) => h("option", { value: room.channel_id }, room.channel_id)),
  );
  const latestIn = async (channel: string) => {
    const list = await api("get", "/chat/messages", { query: { account: context.account, channel } });
    // Asked without group_by_day, the list is flat.
    return "messages" in list ? list.messages : list.days.flatMap((day) => day.messages);
  };
  const show = async (known?: Awaited<ReturnType<typeof latestIn>>) => {
    const channel = picker.value;
    if (!channel) return;
    const latest = known ?? (await latestIn(channel));
    messages.replaceChildren(
      table(
        `Latest messages in ${channel}`,
        ["Id", "When", "From", "Message", "Actions"],
        latest.map((message) => [
          message.id,
          when(message.inserted_at),
          message.created_by_name || message.created_by,
          message.content,
          h(
            "button",
            {
              type: "button",
              class: "danger",
              onclick: async () => {
                const answer = await api("post", "/chat/delete", {
                  body: { account: context.account!, channel, message_ids: [message.id] },
                });
                await show();
                status.textContent = answer.message;
              },
            },
            `Delete message ${message.id}`,
          ),
        ]),
        "no messages.",
      ),
    );
  };
  picker.addEventListener("change", () => void show());
  root.append(
    table(
      "Chat rooms",
      ["Room", "Status", "Created by", "Created"],
      rooms.map((room) => [room.channel_id, room.status, room.created_by, when(room.created_at)]),
      "no chat rooms.",
    ),
    ...(rooms.length > 0 ? [h("div", { class: "inline" }, field("Room", picker))] : []),
    status,
    messages,
  );
  // Opens on a room with something to read: the first of the first few rooms that has messages, else the first.
  for (const room of rooms.slice(0, ROOMS_LOOKED_INTO)) {
    const latest = await latestIn(room.channel_id);
    if (latest.length === 0) continue;
    picker.value = room.channel_id;
    return show(latest);
  }
  await show();
}
