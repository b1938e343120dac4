/**
 * One joined topic of one socket, as its channel sees it (the channel's Member), and whether a
 * join lists the socket in the topic's presence. Apart from socket.ts, which reads frames and
 * keeps a socket's memberships: a member needs only the few things of its socket named below.
 */
import { randomUUID } from "node:crypto";
import type { ServerWebSocket } from "bun";
import type { Actor } from "../modules/auth";
import type { Channel, Member } from "./channel";
import { assertModel, JoinPayload } from "./payloads";
import { broker } from "./process-broker";
import { broadcastFrame, encodeFrame } from "./protocol";
import { accountTopic } from "./topics";

/** What a membership uses of its socket. */
export interface MemberSocket {
  readonly actor: Actor;
  readonly ws: ServerWebSocket<unknown>;
  send(frame: string): void;
}

/**
 * One joined topic of one socket, which is also what its channel sees of it: a socket's few
 * fields and shared methods, no closures, so ten thousand members of a topic cost little.
 */
export class Membership implements Member {
  /** The socket's presence entry on the topic, when it is listed. */
  readonly presenceRef: string | undefined;

  constructor(
    readonly connection: MemberSocket,
    readonly channel: Channel,
    readonly topic: string,
    readonly joinRef: string | null,
    readonly listed: boolean,
  ) {
    this.presenceRef = listed ? randomUUID() : undefined;
  }

  get actor(): Actor {
    return this.connection.actor;
  }

  /** Computed when asked (at joins, pushes and leaves) rather than kept with every membership. */
  get name(): string {
    return this.topic.slice(this.topic.indexOf(":") + 1);
  }

  /** The topic's name inside Parley (scoped by account). */
  get scoped(): string {
    return accountTopic(this.connection.actor.accountId, this.topic);
  }

  push(event: string, payload: unknown): void {
    this.connection.send(encodeFrame(this.joinRef, null, this.topic, event, payload));
  }

  broadcast(event: string, payload: unknown, options?: { others: boolean }): Promise<void> {
    const frame = broadcastFrame(this.topic, event, payload);
    return broker().broadcast(this.scoped, frame, options?.others ? this.connection.ws : undefined);
  }
}

/**
 * A join's payload may say `presence: false`: the socket then is not tracked (not in
 * `presence_state`, no `presence_diff` for it) and is sent no `presence_state` of its own.
 * Every listed member costs each later join its entry, so a topic of thousands of
 * listeners stays affordable only when they join this way.
 */
export function listedOnJoin(payload: unknown): boolean {
  // The protocol's own frame, as Parley's other refusals of protocol frames: bad_request.
  const join = assertModel(JoinPayload, payload, "payload", "bad_request") as typeof JoinPayload.static;
  return join.presence ?? true;
}
