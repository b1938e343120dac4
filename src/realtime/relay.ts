/** The `rtc:<name>` channel: any event goes to the topic's other members, stored nowhere. */
import { AppError } from "../core/errors";
import type { Actor } from "../modules/auth/actor";
import type { Channel } from "./channel";

/** `admit` throws to refuse a join: the app decides who may use which relay topic. */
export function relayChannel(admit: (actor: Actor, name: string) => Promise<void>): Channel {
  return {
    prefix: "rtc",
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
