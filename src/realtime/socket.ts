/**
 * One client socket speaking the Phoenix channels protocol (v2): heartbeats on `phoenix`,
 * `phx_join`/`phx_leave`, presence on every topic, and the channels registered for topic
 * prefixes (channel.ts), which admit joins and answer pushes. Frames of one socket are
 * handled in order, one at a time, so a push never overtakes the join before it.
 */
import { randomUUID } from "node:crypto";
import type { Server, ServerWebSocket } from "bun";
import { config } from "../core/config";
import { AppError, DEPENDENCY_RETRY_AFTER_SECONDS, dependencyFailure, isDependencyDown } from "../core/errors";
import { log } from "../core/log";
import { reportHeld } from "../http/metrics";
import { firstUnstorable } from "../http/text";
import { limitSocketMessage } from "../modules/limits";
import type { Actor } from "../modules/auth";
import { broker } from "./process-broker";
import type { PresenceEntry } from "./broker";
import { attachServer } from "./local-broker";
import { type Channel, channelOf, type Member, registeredChannels } from "./channel";
import { assertJoin, assertModel, assertPush, assertTopicName, JoinPayload } from "./payloads";
import { presenceDiff, presenceState } from "./presence";
import { broadcastFrame, decodeFrame, encodeFrame, type Frame, oversized, PHOENIX_TOPIC, replyFrame } from "./protocol";
import { accountTopic } from "./topics";

/** Frames a socket may have waiting; a client that floods past this is disconnected. */
const MAX_PENDING_FRAMES = 256;
/** WebSocket close codes (RFC 6455 and the registry). */
export const CLOSE_UNSUPPORTED_DATA = 1003;
export const CLOSE_POLICY = 1008;
export const CLOSE_GOING_AWAY = 1001;
/**
 * Service Restart (IANA registry): the server is stopping and the client should connect again,
 * reaching another process. Any code but 1000 makes the phoenix client reconnect; this one
 * also says why to proxies and other clients.
 */
export const CLOSE_SERVICE_RESTART = 1012;
/** The reply to a push the server did not start because it is stopping: nothing of it was done. */
export const SHUTTING_DOWN = {
  reason: "shutting_down",
  message: "the server is shutting down; reconnect and send again",
} as const;
/** A push taken back unstarted (a message not yet being stored) because the server is stopping. */
class ShuttingDown extends Error {}

/** Topics joined by every socket of this process, and joins refused at LIMIT_TOPICS_PER_SOCKET, for /metrics. */
let topicsJoined = 0;
let topicsRefused = 0;
reportHeld(() => ({
  resource: "socket_topics",
  inUse: topicsJoined,
  caps: { socket: config.limits.held.topicsPerSocket },
  refused: { "socket.topics": topicsRefused },
}));

interface Membership {
  channel: Channel;
  member: Member;
  joinRef: string | null;
  /** The topic's name inside Parley (scoped by account). */
  scoped: string;
  presenceRef: string;
}

/**
 * A join's payload may say `presence: false`: the socket then is not tracked (not in
 * `presence_state`, no `presence_diff` for it) and is sent no `presence_state` of its own.
 * Every listed member costs each later join its entry, so a topic of thousands of
 * listeners stays affordable only when they join this way.
 */
function listedOnJoin(payload: unknown): boolean {
  // The protocol's own frame, as Parley's other refusals of protocol frames: bad_request.
  const join = assertModel(JoinPayload, payload, "payload", "bad_request") as typeof JoinPayload.static;
  return join.presence ?? true;
}

type Raw = ServerWebSocket<unknown>;

export class Connection {
  lastSeen = Date.now();
  private readonly joined = new Map<string, Membership>();
  private queue: Promise<void> = Promise.resolve();
  /** Pushes handed on (answered later, such as messages being stored) whose replies have not gone out yet. */
  private inFlight: Promise<void> = Promise.resolve();
  private pending = 0;
  private closed = false;

  constructor(
    readonly ws: Raw,
    readonly actor: Actor,
  ) {}

  /** Takes a frame as Bun delivered it; handling waits behind the frames before it. */
  receive(message: unknown): void {
    this.lastSeen = Date.now();
    // Answered at once, not behind the work in flight: the client can send it elsewhere sooner.
    if (draining) {
      this.refuse(message);
      return;
    }
    if (++this.pending > MAX_PENDING_FRAMES) {
      this.ws.close(CLOSE_POLICY, "too many frames waiting");
      return;
    }
    const rateCheck = this.checkRate(message);
    this.queue = this.queue
      .then(() => this.handle(message, rateCheck))
      .catch((error: Error) => log.error({ err: error.message, stack: error.stack }, "realtime: frame handling failed"))
      .finally(() => {
        this.pending--;
      });
  }

  /**
   * Starts a push's rate check as the frame arrives, beside the checks of the frames ahead
   * of it, so a burst costs one Redis round trip instead of one per frame (and its frames
   * go out together). Heartbeats are free. Awaited, in order, when the frame is handled.
   */
  private checkRate(message: unknown): Promise<void> | undefined {
    const frame = decodeFrame(message);
    if ("error" in frame || frame.topic === PHOENIX_TOPIC) return undefined;
    const check = limitSocketMessage(this.actor.accountId, this.actor.userId);
    // A frame dropped unhandled (its socket closed) must not leave a refusal unhandled.
    check.catch(() => {});
    return check;
  }

  /** Replies to a push once `work` settles, counting it as a waiting frame until then. */
  private answerWhenDone(frame: Frame, work: Promise<unknown>): void {
    this.pending++;
    const answered = work.then(
      (response) => this.send(replyFrame(frame, "ok", response)),
      (error) => this.replyFailure(frame, error),
    );
    this.inFlight = Promise.all([this.inFlight, answered]).then(() => {
      this.pending--;
    });
  }

  private send(frame: string): void {
    if (!this.closed) this.ws.send(frame);
  }

  /** A frame the stopping server will not act on gets an error reply, so the client knows to send it again. */
  private refuse(message: unknown): void {
    const frame = decodeFrame(message);
    if (!("error" in frame)) this.send(replyFrame(frame, "error", SHUTTING_DOWN));
  }

  private async handle(message: unknown, rateCheck: Promise<void> | undefined): Promise<void> {
    if (this.closed) return;
    // Waited behind the frame in flight when the server began to stop.
    if (draining) {
      this.refuse(message);
      return;
    }
    if (
      typeof message !== "string" &&
      (typeof message !== "object" ||
        message === null ||
        message instanceof Uint8Array ||
        message instanceof ArrayBuffer)
    ) {
      this.ws.close(CLOSE_UNSUPPORTED_DATA, "only JSON text frames are understood");
      return;
    }
    const frame = decodeFrame(message);
    if ("error" in frame) {
      this.ws.close(CLOSE_UNSUPPORTED_DATA, frame.error);
      return;
    }
    const tooLong = oversized(frame);
    if (tooLong) {
      this.send(replyFrame(frame, "error", tooLong));
      return;
    }
    // Topics name rooms and payloads become messages: both reach PostgreSQL.
    const unstorable = firstUnstorable(frame.topic, "topic") ?? firstUnstorable(frame.payload, "payload");
    if (unstorable) {
      this.send(
        replyFrame(frame, "error", { reason: "bad_request", message: `${unstorable.path}: ${unstorable.reason}` }),
      );
      return;
    }
    try {
      await this.dispatch(frame, rateCheck);
    } catch (error) {
      this.replyFailure(frame, error);
    }
  }

  /** The error reply to a push that could not be served; the socket stays open. */
  private replyFailure(frame: Frame, error: unknown): void {
    if (error instanceof ShuttingDown) {
      this.send(replyFrame(frame, "error", SHUTTING_DOWN));
    } else if (error instanceof AppError) {
      this.send(replyFrame(frame, "error", { ...error.extra, reason: error.code, message: error.message }));
    } else if (isDependencyDown(error)) {
      // The push was not applied; the socket stays open and the client may push it again.
      log.warn({ err: dependencyFailure(error), event: frame.event }, "realtime: dependency down");
      this.send(
        replyFrame(frame, "error", {
          reason: "dependency_down",
          message: "a service Parley depends on is unavailable; retry later",
          retry_after: DEPENDENCY_RETRY_AFTER_SECONDS,
        }),
      );
    } else {
      log.error(
        { err: (error as Error).message, stack: (error as Error).stack, event: frame.event },
        "realtime: push failed",
      );
      this.send(replyFrame(frame, "error", { reason: "internal", message: "internal error" }));
    }
  }

  private async dispatch(frame: Frame, rateCheck: Promise<void> | undefined): Promise<void> {
    if (frame.topic === PHOENIX_TOPIC) {
      if (frame.event !== "heartbeat")
        throw new AppError("bad_request", `unknown event "${frame.event}" on topic phoenix`);
      this.send(replyFrame(frame, "ok", {}));
      return;
    }
    // Heartbeats are free, so a user over the limit keeps the socket and is told why each push is refused.
    await (rateCheck ?? limitSocketMessage(this.actor.accountId, this.actor.userId));
    // A join or leave comes after the replies to the pushes before it, as it would if they had been awaited.
    if (frame.event === "phx_join" || frame.event === "phx_leave") await this.inFlight;
    if (frame.event === "phx_join") return this.join(frame);
    const membership = this.joined.get(frame.topic);
    // Phoenix's answer to a push on a topic the socket has not joined.
    if (!membership) {
      this.send(replyFrame(frame, "error", { reason: "unmatched topic" }));
      return;
    }
    if (frame.event === "phx_leave") {
      await this.leave(frame.topic, membership);
      this.send(replyFrame(frame, "ok", {}));
      this.send(encodeFrame(membership.joinRef, membership.joinRef, frame.topic, "phx_close", {}));
      return;
    }
    const payload = assertPush(membership.channel, frame.event, frame.payload);
    const answer = await membership.channel.push(membership.member, frame.event, payload);
    // A reply handed on does not hold up the next frame: the work runs beside it, the reply follows the work.
    if ("later" in answer) this.answerWhenDone(frame, answer.later);
    else this.send(replyFrame(frame, "ok", answer.reply));
  }

  private async join(frame: Frame): Promise<void> {
    const route = channelOf(frame.topic);
    if (!route) {
      this.send(replyFrame(frame, "error", { reason: "unmatched topic" }));
      return;
    }
    // Each topic costs a subscription, a presence entry and the broker's interest: refused before the channel's checks.
    const cap = config.limits.held.topicsPerSocket;
    if (!this.joined.has(frame.topic) && this.joined.size >= cap) {
      topicsRefused++;
      const message = `at most ${cap} topics joined at once per socket; leave one first, or open another socket`;
      this.send(replyFrame(frame, "error", { reason: "too many topics", message }));
      return;
    }
    assertTopicName(route.channel, route.name);
    const welcome = await route.channel.join(this.actor, route.name, assertJoin(route.channel, frame.payload));
    // Read once the channel has admitted the actor: a caller it refuses learns nothing more.
    const listed = listedOnJoin(frame.payload);

    // Joining a topic again replaces the earlier membership, as Phoenix does.
    const earlier = this.joined.get(frame.topic);
    if (earlier) {
      await this.leave(frame.topic, earlier);
      this.send(encodeFrame(earlier.joinRef, earlier.joinRef, frame.topic, "phx_close", {}));
    }
    // The peer may have gone while the channel admitted it; the leave queued behind this frame cleans up what follows.
    if (this.closed) return;
    const scoped = accountTopic(this.actor.accountId, frame.topic);
    const membership: Membership = {
      channel: route.channel,
      member: this.member(frame, route.name, scoped, listed),
      joinRef: frame.joinRef,
      scoped,
      presenceRef: randomUUID(),
    };
    this.joined.set(frame.topic, membership);
    topicsJoined++;
    this.ws.subscribe(membership.scoped);
    await broker().subscribe(membership.scoped);
    this.send(replyFrame(frame, "ok", {}));

    if (listed) {
      const entry: PresenceEntry = {
        key: this.actor.userId,
        meta: {
          phx_ref: membership.presenceRef,
          name: this.actor.name || this.actor.userId,
          online_at: new Date().toISOString(),
        },
      };
      await broker().track(membership.scoped, entry);
      membership.member.push("presence_state", presenceState(await broker().presence(membership.scoped)));
      await membership.member.broadcast("presence_diff", presenceDiff([entry], []));
    }
    await welcome?.(membership.member);
  }

  /** The joined topic as its channel sees it. */
  private member(frame: Frame, name: string, scoped: string, listed: boolean): Member {
    return {
      actor: this.actor,
      topic: frame.topic,
      name,
      listed,
      push: (event, payload) => this.send(encodeFrame(frame.joinRef, null, frame.topic, event, payload)),
      broadcast: (event, payload, options) =>
        broker().broadcast(scoped, broadcastFrame(frame.topic, event, payload), options?.others ? this.ws : undefined),
    };
  }

  /** Forgets a membership and tells the others; tolerant of a broker that has gone away. */
  private async leave(topic: string, membership: Membership): Promise<void> {
    if (this.joined.delete(topic)) topicsJoined--;
    if (!this.closed) this.ws.unsubscribe(membership.scoped);
    const entry: PresenceEntry = { key: this.actor.userId, meta: { phx_ref: membership.presenceRef } };
    try {
      if (membership.member.listed) {
        await broker().untrack(membership.scoped, membership.presenceRef);
        await membership.member.broadcast("presence_diff", presenceDiff([], [entry]));
      }
      await membership.channel.leave?.(membership.member);
      await broker().unsubscribe(membership.scoped);
    } catch (error) {
      log.warn({ err: (error as Error).message }, "realtime: leave not announced");
    }
  }

  /** The server is stopping: once the frame in flight is answered, the client is told to reconnect. */
  drain(): Promise<void> {
    return this.queue.then(async () => {
      await this.inFlight;
      if (!this.closed) this.ws.close(CLOSE_SERVICE_RESTART, "server restarting");
    });
  }

  /** The socket has closed: frames not yet started are dropped; every channel is left once the running one is done. */
  closedByPeer(): Promise<void> {
    this.closed = true;
    this.queue = this.queue.then(async () => {
      for (const [topic, membership] of [...this.joined]) await this.leave(topic, membership);
    });
    return this.queue;
  }
}

const connections = new Map<Raw, Connection>();
/** Set once, when the process begins to stop: no push is started after it. */
let draining = false;
let sweeper: ReturnType<typeof setInterval> | undefined;

/** Closes sockets that have sent nothing, not even a heartbeat, within the idle timeout. */
function sweepIdle(): void {
  const limit = Date.now() - config.realtime.idleTimeoutSeconds * 1000;
  for (const connection of connections.values()) {
    if (connection.lastSeen < limit) connection.ws.close(CLOSE_GOING_AWAY, "idle");
  }
}

export function openConnection(ws: Raw, server: Server<unknown> | null, actor: Actor): void {
  // An upgrade that was already being checked when the server began to stop.
  if (draining) {
    ws.close(CLOSE_SERVICE_RESTART, "server restarting");
    return;
  }
  if (server) attachServer(server);
  connections.set(ws, new Connection(ws, actor));
  if (!sweeper) {
    sweeper = setInterval(sweepIdle, Math.min(5_000, (config.realtime.idleTimeoutSeconds * 1000) / 4));
    sweeper.unref?.();
  }
}

export function connectionOf(ws: Raw): Connection | undefined {
  return connections.get(ws);
}

export async function closeConnection(ws: Raw): Promise<void> {
  const connection = connections.get(ws);
  if (!connection) return;
  connections.delete(ws);
  if (connections.size === 0 && sweeper) {
    clearInterval(sweeper);
    sweeper = undefined;
  }
  await connection.closedByPeer();
}

/**
 * Stops the sockets of this process for a shutdown: pushes not yet started are answered with
 * an error, the ones in flight finish and are answered, then every client is closed with
 * 1012 so it reconnects (to another process). Resolves when all are closed.
 */
export async function drainConnections(): Promise<void> {
  draining = true;
  const reason = new ShuttingDown(SHUTTING_DOWN.message);
  for (const channel of registeredChannels()) channel.drain?.(reason);
  await Promise.all([...connections.values()].map((connection) => connection.drain()));
}
