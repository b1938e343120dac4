/**
 * One client socket speaking the Phoenix channels protocol (v2): heartbeats on `phoenix`,
 * `phx_join`/`phx_leave`, presence on every topic, and the channels registered for topic
 * prefixes (channel.ts), which admit joins and answer pushes. Frames of one socket are
 * handled in order, one at a time, so a push never overtakes the join before it.
 */
import type { ServerWebSocket } from "bun";
import { config } from "../core/config";
import { AppError, DEPENDENCY_RETRY_AFTER_SECONDS, dependencyFailure, isDependencyDown } from "../core/errors";
import { log } from "../core/log";
import { firstUnstorable } from "../http/text";
import { limitSocketMessage } from "../modules/limits";
import type { Actor } from "../modules/auth";
import { broker } from "./process-broker";
import type { PresenceEntry } from "./broker";
import { channelOf } from "./channel";
import { listedOnJoin, Membership } from "./membership";
import { admit, dismiss, isDraining, ShuttingDown } from "./open-sockets";
import { assertJoin, assertPush, assertTopicName } from "./payloads";
import { presenceDiff, presenceState } from "./presence";
import {
  CLOSE_POLICY,
  CLOSE_SERVICE_RESTART,
  CLOSE_UNSUPPORTED_DATA,
  decodeFrame,
  encodeFrame,
  type Frame,
  oversized,
  PHOENIX_TOPIC,
  replyFrame,
  SHUTTING_DOWN,
} from "./protocol";
import { socketCaps, topicCounts, UNOPENED_MS } from "./socket-caps";

/** Frames a socket may have waiting; a client that floods past this is disconnected. */
const MAX_PENDING_FRAMES = 256;
type Raw = ServerWebSocket<unknown>;
const releaseUnopened = (connection: Connection) => connection.release();
/** What a binary frame decodes to: the protocol is JSON text. */
const BINARY = { error: "only JSON text frames are understood" } as const;
/** Where a socket's chains of frames start: one settled promise for every socket. */
const SETTLED = Promise.resolve();

/**
 * One socket: the data Bun keeps with it (`server.upgrade`'s `data`, index.ts) and its
 * handlers. The app's Bun websocket handlers call the socket data's own `open`, `message`
 * and `close` (Elysia's do, for every socket it upgrades), so this class is all a socket
 * costs beyond Bun's own: no closures, no copy of the upgrade request, memberships only
 * once it joins.
 */
export class Connection {
  /** Bun's socket, from its open on. */
  ws!: Raw;
  lastSeen = Date.now();
  /** The topics joined: most sockets join one, which is kept without a map. */
  private joined: Membership | Map<string, Membership> | undefined;
  private queue = SETTLED;
  /** Pushes handed on (answered later, such as messages being stored) whose replies have not gone out yet. */
  private inFlight = SETTLED;
  private pending = 0;
  private closed = false;
  /** The socket holds its slot of the caps, from the check before the upgrade until it closes. */
  private holding = true;
  /** Gives the slot back if Bun never opens the socket; cleared when it does. */
  private unopened: ReturnType<typeof setTimeout> | undefined;

  /**
   * Takes the socket's slot of the caps (per token, named by `credential`, per user, per
   * account and per process), or throws the refusal.
   */
  constructor(
    readonly actor: Actor,
    private readonly credential: string,
  ) {
    socketCaps.hold(this.slot());
    this.unopened = setTimeout(releaseUnopened, UNOPENED_MS, this);
    this.unopened.unref?.();
  }

  /** The keys of the socket's slot, made again when it is given back rather than kept. */
  private slot(): string[] {
    return [this.credential, `${this.actor.accountId}:${this.actor.userId}`, this.actor.accountId];
  }

  /** Gives the socket's slot back: once, however the socket ends (or never opens). */
  release(): void {
    if (!this.holding) return;
    this.holding = false;
    clearTimeout(this.unopened);
    this.unopened = undefined;
    socketCaps.give(this.slot());
  }

  /** Bun's `open`: the socket counts from here, and is closed at once if the server is stopping. */
  open(ws: Raw): void {
    clearTimeout(this.unopened);
    this.unopened = undefined;
    this.ws = ws;
    // An upgrade that was already being checked when the server began to stop.
    if (!admit(this)) ws.close(CLOSE_SERVICE_RESTART, "server restarting");
  }

  /** Bun's `message`. */
  message(_ws: Raw, message: string | Buffer): void {
    this.receive(message);
  }

  /** Bun's `close`: the slot is given back, and every topic left once the frame being handled is done. */
  close(): Promise<void> | undefined {
    this.release();
    if (!dismiss(this)) return undefined;
    return this.closedByPeer();
  }

  /** Takes a frame as Bun delivered it, decoded once; handling waits behind the frames before it. */
  private receive(message: string | Buffer): void {
    this.lastSeen = Date.now();
    const frame = typeof message === "string" ? decodeFrame(message) : BINARY;
    // Answered at once, not behind the work in flight: the client can send it elsewhere sooner.
    if (isDraining()) {
      this.refuse(frame);
      return;
    }
    if (++this.pending > MAX_PENDING_FRAMES) {
      this.ws.close(CLOSE_POLICY, "too many frames waiting");
      return;
    }
    const rateCheck = this.checkRate(frame);
    const queued = this.queue
      .then(() => this.handle(frame, rateCheck))
      .catch((error: Error) => log.error({ err: error.message, stack: error.stack }, "realtime: frame handling failed"))
      .finally(() => {
        this.pending--;
        // Nothing more waits behind it: an idle socket keeps no settled chain of its own.
        if (this.queue === queued) this.queue = SETTLED;
      });
    this.queue = queued;
  }

  /**
   * Starts a push's rate check as the frame arrives, beside the checks of the frames ahead
   * of it, so a burst costs one Redis round trip instead of one per frame (and its frames
   * go out together). Heartbeats are free. Awaited, in order, when the frame is handled.
   */
  private checkRate(frame: Frame | { error: string }): Promise<void> | undefined {
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
    const inFlight = Promise.all([this.inFlight, answered]).then(() => {
      this.pending--;
      if (this.inFlight === inFlight) this.inFlight = SETTLED;
    });
    this.inFlight = inFlight;
  }

  send(frame: string): void {
    if (!this.closed) this.ws.send(frame);
  }

  /** A frame the stopping server will not act on gets an error reply, so the client knows to send it again. */
  private refuse(frame: Frame | { error: string }): void {
    if (!("error" in frame)) this.send(replyFrame(frame, "error", SHUTTING_DOWN));
  }

  private async handle(frame: Frame | { error: string }, rateCheck: Promise<void> | undefined): Promise<void> {
    if (this.closed) return;
    // Waited behind the frame in flight when the server began to stop.
    if (isDraining()) {
      this.refuse(frame);
      return;
    }
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
    const membership = this.membershipOf(frame.topic);
    // Phoenix's answer to a push on a topic the socket has not joined.
    if (!membership) {
      this.send(replyFrame(frame, "error", { reason: "unmatched topic" }));
      return;
    }
    if (frame.event === "phx_leave") {
      await this.leave(membership);
      this.send(replyFrame(frame, "ok", {}));
      this.send(encodeFrame(membership.joinRef, membership.joinRef, frame.topic, "phx_close", {}));
      return;
    }
    const payload = assertPush(membership.channel, frame.event, frame.payload);
    const answer = await membership.channel.push(membership, frame.event, payload);
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
    const earlier = this.membershipOf(frame.topic);
    if (!earlier && this.memberships().length >= cap) {
      topicCounts.refused++;
      const message = `at most ${cap} topics joined at once per socket; leave one first, or open another socket`;
      this.send(replyFrame(frame, "error", { reason: "too many topics", message }));
      return;
    }
    assertTopicName(route.channel, route.name);
    const welcome = await route.channel.join(this.actor, route.name, assertJoin(route.channel, frame.payload));
    // Read once the channel has admitted the actor: a caller it refuses learns nothing more.
    const listed = listedOnJoin(frame.payload);

    // Joining a topic again replaces the earlier membership, as Phoenix does.
    if (earlier) {
      await this.leave(earlier);
      this.send(encodeFrame(earlier.joinRef, earlier.joinRef, frame.topic, "phx_close", {}));
    }
    // The peer may have gone while the channel admitted it; the leave queued behind this frame cleans up what follows.
    if (this.closed) return;
    const membership = new Membership(this, route.channel, frame.topic, frame.joinRef, listed);
    const scoped = membership.scoped;
    if (this.joined === undefined) this.joined = membership;
    else if (this.joined instanceof Membership) this.joined = new Map([[this.joined.topic, this.joined]]);
    if (this.joined instanceof Map) this.joined.set(frame.topic, membership);
    topicCounts.joined++;
    this.ws.subscribe(scoped);
    await broker().subscribe(scoped);
    this.send(replyFrame(frame, "ok", {}));

    if (membership.presenceRef) {
      const entry: PresenceEntry = {
        key: this.actor.userId,
        meta: {
          phx_ref: membership.presenceRef,
          name: this.actor.name || this.actor.userId,
          online_at: new Date().toISOString(),
        },
      };
      await broker().track(scoped, entry);
      membership.push("presence_state", presenceState(await broker().presence(scoped)));
      await membership.broadcast("presence_diff", presenceDiff([entry], []));
    }
    await welcome?.(membership);
  }

  private membershipOf(topic: string): Membership | undefined {
    if (this.joined instanceof Map) return this.joined.get(topic);
    return this.joined?.topic === topic ? this.joined : undefined;
  }

  private memberships(): Membership[] {
    if (this.joined instanceof Map) return [...this.joined.values()];
    return this.joined ? [this.joined] : [];
  }

  private forget(membership: Membership): boolean {
    if (this.joined === membership) {
      this.joined = undefined;
      return true;
    }
    return this.joined instanceof Map && this.joined.delete(membership.topic);
  }

  /** Forgets a membership and tells the others; tolerant of a broker that has gone away. */
  private async leave(membership: Membership): Promise<void> {
    if (this.forget(membership)) topicCounts.joined--;
    const scoped = membership.scoped;
    if (!this.closed) this.ws.unsubscribe(scoped);
    try {
      if (membership.presenceRef) {
        const entry: PresenceEntry = { key: this.actor.userId, meta: { phx_ref: membership.presenceRef } };
        await broker().untrack(scoped, membership.presenceRef);
        await membership.broadcast("presence_diff", presenceDiff([], [entry]));
      }
      await membership.channel.leave?.(membership);
      await broker().unsubscribe(scoped);
    } catch (error) {
      log.warn({ err: (error as Error).message }, "realtime: leave not announced");
    }
  }

  /** The server is stopping: once the frame in flight is answered, the client is told to reconnect. */
  restart(): Promise<void> {
    return this.queue.then(async () => {
      await this.inFlight;
      if (!this.closed) this.ws.close(CLOSE_SERVICE_RESTART, "server restarting");
    });
  }

  /** The socket has closed: frames not yet started are dropped; every channel is left once the running one is done. */
  private closedByPeer(): Promise<void> {
    this.closed = true;
    this.queue = this.queue.then(async () => {
      for (const membership of this.memberships()) await this.leave(membership);
    });
    return this.queue;
  }
}
