/** Dial-in numbers, a room's mapper id for phone callers, and recent calls with their outcome. */
import { roomLabel } from "../../../../core/room-key";
import { api } from "../api";
import { field, h, notice, table, when } from "../dom";
import type { PageContext } from "../page";

export async function phonePage(root: HTMLElement, context: PageContext): Promise<void> {
  const { numbers, calls } = await api("get", "/phone", { query: { account: context.account } });
  const room = h("input", { name: "room", required: true, placeholder: "room@conference.example.com" });
  const answer = notice();
  root.append(
    table(
      "Dial-in numbers",
      ["Id", "Country", "Number", "Toll-free"],
      numbers.map((number) => [number.id, number.countryCode, number.formattedNumber, number.tollFree ? "yes" : "no"]),
      "none; add one on the server with npm run parley -- add-number <account-id> <country> <number>.",
    ),
    h("h2", {}, "Mapper id of a room"),
    h(
      "form",
      {
        class: "inline",
        onsubmit: async (event: Event) => {
          event.preventDefault();
          try {
            const mapping = await api("get", "/phone/mapper", {
              query: { account: context.account, room: room.value },
            });
            answer.textContent = `${mapping.conference}: callers enter ${mapping.id}`;
          } catch (error) {
            answer.textContent = error instanceof Error ? error.message : String(error);
          }
        },
      },
      field("Conference address", room),
      h("button", { type: "submit" }, "Look up"),
    ),
    answer,
    h("h2", {}, "Recent calls"),
    table(
      "Calls of the last 7 days",
      ["Started", "Room", "Caller", "Called", "Answered", "Minutes", "Outcome"],
      calls.map((call) => [
        when(call.started_at),
        roomLabel(call.room),
        call.caller ?? "—",
        call.callee ?? "—",
        call.answered ? "yes" : "no",
        call.minutes,
        call.reason ?? "—",
      ]),
    ),
  );
}
