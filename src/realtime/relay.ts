/** The `rtc:<name>` channel: any event goes to the topic's other members, stored nowhere. */
import { t } from "elysia";
import { AppError } from "../core/errors";
import type { Actor } from "../modules/auth";
import type { Channel, ChannelModels } from "./channel";

/**
 * `admit` throws to refuse a join: the app decides who may use which relay topic, and
 * what a topic's name must be (`name`). Payloads are the clients' own, relayed as sent.
 */
export function relayChannel(
  admit: (actor: Actor, name: string) => Promise<void>,
  name: ChannelModels["name"],
): Channel {
  return {
    prefix: "rtc",
    models: { name, events: {}, otherEvents: t.Unknown() },
    async join(actor, name) {
      await admit(actor, name);
      return undefined;
    },
    /** `from` names the sender and cannot be forged. */
    async push(member, event, payload) {
      if (event.startsWith("phx_")) throw new AppError("bad_request", `"${event}" is reserved by the protocol`);
      const relayed =
        typeof payload === "object" && payload !== null && !Array.isArray(payload)
          ? { ...payload, from: member.actor.userId }
          : payload;
      await member.broadcast(event, relayed, { others: true });
      return { reply: {} };
    },
  };
}
