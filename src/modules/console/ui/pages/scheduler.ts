/** Reservations and conferences of the account, with create and delete. */
import { api } from "../api";
import { field, h, notice, table, wallClock, when } from "../dom";
import type { PageContext } from "../page";

export async function schedulerPage(root: HTMLElement, context: PageContext): Promise<void> {
  const status = notice();
  const lists = h("div");
  const load = async () => {
    const { reservations, conferences } = await api("get", "/scheduler", { query: { account: context.account } });
    lists.replaceChildren(
      table(
        "Reservations",
        ["Id", "Room", "Owner", "Starts", "Minutes", "Time zone", "Actions"],
        reservations.map((reservation) => [
          reservation.id,
          reservation.name,
          reservation.mail_owner,
          wallClock(reservation.start_time, reservation.timezone),
          reservation.duration,
          reservation.timezone,
          h(
            "button",
            {
              type: "button",
              class: "danger",
              onclick: async () => {
                await api("delete", "/scheduler/reservations/:id", {
                  params: { id: String(reservation.id) },
                  query: { account: context.account },
                });
                await load();
                status.textContent = `Reservation ${reservation.name} deleted.`;
              },
            },
            `Delete reservation ${reservation.name}`,
          ),
        ]),
      ),
      table(
        "Conferences",
        ["Id", "Room", "Owner", "Started", "Seconds", "Ended"],
        conferences.map((conference) => [
          conference.id,
          conference.name,
          conference.mail_owner,
          when(conference.start_time),
          conference.duration,
          when(conference.ended_at),
        ]),
      ),
    );
  };
  const name = h("input", { name: "name", required: true });
  const owner = h("input", { name: "mail_owner", type: "email", required: true });
  const startTime = h("input", { name: "start_time", type: "datetime-local", required: true });
  const duration = h("input", { name: "duration", type: "number", min: 1, value: 60, required: true });
  const timezone = h("input", { name: "timezone", value: Intl.DateTimeFormat().resolvedOptions().timeZone });
  const form = h(
    "form",
    {
      class: "inline",
      onsubmit: async (event: Event) => {
        event.preventDefault();
        try {
          await api("post", "/scheduler/reservations", {
            body: {
              account: context.account!,
              name: name.value,
              mail_owner: owner.value,
              start_time: startTime.value,
              duration: Number(duration.value),
              timezone: timezone.value,
            },
          });
          await load();
          status.textContent = `Reservation ${name.value} created.`;
        } catch (error) {
          status.textContent = error instanceof Error ? error.message : String(error);
        }
      },
    },
    field("Room", name),
    field("Owner e-mail", owner),
    field("Starts", startTime),
    field("Minutes", duration),
    field("Time zone", timezone),
    h("button", { type: "submit" }, "Reserve"),
  );
  root.append(h("h2", {}, "New reservation"), form, status, lists);
  await load();
}
