/**
 * The socket's validation hook, as Supabase Realtime checks every payload against its schema
 * before the handler: a topic's name, a join's payload and each pushed event's payload are
 * checked against the TypeBox models their channel declares, compiled once, before the
 * channel sees them. A refusal names the field, with the reason the model gives (its REASON,
 * the same text a REST answer gives for the same model).
 */
import { t, type TSchema } from "elysia";
import { type TypeCheck, TypeCompiler } from "elysia/type-system";
import { AppError, type ErrorCode } from "../core/errors";
import { REASON, reasonOf } from "../http/text";
import type { Channel } from "./channel";

/** A join's own payload: `presence: false` keeps the member out of the topic's presence (socket.ts). */
export const JoinPayload = t.Object({
  presence: t.Optional(t.Boolean({ [REASON]: "true or false (a join with presence false is not listed)" })),
});

const compiled = new WeakMap<TSchema, TypeCheck<TSchema>>();

function compiledOf(model: TSchema): TypeCheck<TSchema> {
  let check = compiled.get(model);
  if (!check) {
    check = TypeCompiler.Compile(model);
    compiled.set(model, check);
  }
  return check;
}

/**
 * `value` as its model reads it (a numeric string given for an integer becomes the number, as
 * Elysia's routes read it); throws `code` naming the first field the model refuses, `where`
 * naming the value itself.
 */
export function assertModel(model: TSchema, value: unknown, where: string, code: ErrorCode): unknown {
  const check = compiledOf(model);
  if (check.Check(value)) return check.Decode(value);
  const first = check.Errors(value).First();
  const path = first?.path.replace(/^\//, "").replaceAll("/", ".") ?? "";
  const reason = reasonOf(first?.schema) ?? first?.message ?? "invalid";
  throw new AppError(code, `${path || where}: ${reason}`);
}

/** Refuses a topic whose name (after `<prefix>:`) the channel's model does not admit. */
export function assertTopicName(channel: Channel, name: string): void {
  assertModel(channel.models.name.model, name, channel.models.name.field, "validation_failed");
}

/** A join's payload as the channel's `join` model reads it (as sent when it has none); refuses what it refuses. */
export function assertJoin(channel: Channel, payload: unknown): unknown {
  const model = channel.models.join;
  return model ? assertModel(model, payload, "payload", "validation_failed") : payload;
}

/** The payload as its model reads it; refuses an event the channel does not take, and a payload its model refuses. */
export function assertPush(channel: Channel, event: string, payload: unknown): unknown {
  const { events, otherEvents } = channel.models;
  const model = Object.hasOwn(events, event) ? events[event] : otherEvents;
  if (!model) {
    const known = Object.keys(events).join(" or ");
    if (!known)
      throw new AppError("bad_request", `${channel.prefix} topics are read-only: "${event}" is not taken here`);
    throw new AppError("bad_request", `unknown event "${event}" on a ${channel.prefix} topic; send ${known}`);
  }
  return assertModel(model, payload, "payload", "validation_failed");
}
