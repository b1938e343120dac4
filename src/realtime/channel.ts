/**
 * Channels, as Phoenix and Supabase Realtime have them: the socket speaks the protocol (refs,
 * heartbeats, joins and leaves, presence, the order of frames, draining on stop) and hands
 * every topic `<prefix>:<name>` to the channel registered for its prefix. A feature owns its
 * channel and registers it where the app is assembled.
 */
import type { TSchema } from "elysia";
import type { Actor } from "../modules/auth";

/** One socket's membership of one topic, as its channel sees it. */
export interface Member {
  readonly actor: Actor;
  /** The topic as the client names it, `<prefix>:<name>`. */
  readonly topic: string;
  /** The topic after the prefix and its colon. */
  readonly name: string;
  /** In the topic's presence: false when the join asked for `presence: false`, and then not announced either. */
  readonly listed: boolean;
  /** An event to this socket alone. */
  push(event: string, payload: unknown): void;
  /**
   * An event to every socket on the topic, on every process; with `others`, this socket is
   * left out. Rejects as the broker's broadcast does.
   */
  broadcast(event: string, payload: unknown, options?: { others: boolean }): Promise<void>;
}

/** A push's `ok` reply: sent at once, or once `later` settles, while the socket's next frames are handled. */
export type Answer = { reply: unknown } | { later: Promise<unknown> };

/** A channel's own greeting to a new member, after the join's reply and the presence state. */
export type Welcome = (member: Member) => Promise<void>;

/** What the socket checks before a channel sees a join or a push (payloads.ts). */
export interface ChannelModels {
  /** The topic's name after the prefix, and the field an error reply calls it. */
  readonly name: { readonly field: string; readonly model: TSchema };
  /** The payload of each event a client may push, by event name. */
  readonly events: Readonly<Record<string, TSchema>>;
  /** The payload of any event not in `events` (a relay's); without it such an event is refused. */
  readonly otherEvents?: TSchema;
  /** What the channel reads of a join's payload, beside the socket's own `presence`. */
  readonly join?: TSchema;
}

export interface Channel {
  readonly prefix: string;
  readonly models: ChannelModels;
  /**
   * Admits the actor to the topic named `name` (its model admitted it), or throws: an AppError is
   * the reply. `payload` is the join's, as the channel's `join` model reads it (as sent without one).
   */
  join(actor: Actor, name: string, payload: unknown): Promise<Welcome | undefined>;
  /**
   * A client event on a joined topic (any but phx_join and phx_leave), its payload admitted by
   * its model; throws to answer with an error.
   */
  push(member: Member, event: string, payload: unknown): Promise<Answer>;
  /** The member has left (or its socket closed) and its presence is withdrawn; it no longer hears the topic. */
  leave?(member: Member): Promise<void>;
  /** The process is stopping: work taken from pushes but not yet started fails with `reason`. */
  drain?(reason: Error): void;
}

const channels = new Map<string, Channel>();

/** Routes `<prefix>:...` topics to each channel; registering the same channel again changes nothing. */
export function registerChannels(...added: Channel[]): void {
  for (const channel of added) {
    const known = channels.get(channel.prefix);
    if (known && known !== channel)
      throw new Error(`realtime: a channel is already registered for "${channel.prefix}:"`);
    channels.set(channel.prefix, channel);
  }
}

/** The channel serving a topic, with the topic's name inside it. */
export function channelOf(topic: string): { channel: Channel; name: string } | undefined {
  const separator = topic.indexOf(":");
  const channel = separator < 0 ? undefined : channels.get(topic.slice(0, separator));
  return channel && { channel, name: topic.slice(separator + 1) };
}

export function registeredChannels(): Iterable<Channel> {
  return channels.values();
}
