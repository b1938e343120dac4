/**
 * Phoenix channels protocol, serializer version 2: every frame is the JSON array
 * `[join_ref, ref, topic, event, payload]`. Replies to a push carry the push's refs;
 * broadcasts carry null refs, so one encoded frame serves every subscriber.
 */

export interface Frame {
  joinRef: string | null;
  ref: string | null;
  topic: string;
  event: string;
  payload: unknown;
}

export const PHOENIX_TOPIC = "phoenix";
/** A topic names a channel and its room (channel ids are at most 128 characters); a longer one gets an error reply. */
const MAX_TOPIC_LENGTH = 256;
const MAX_EVENT_LENGTH = 128;

const isRef = (value: unknown): value is string | null =>
  value === null || (typeof value === "string" && value.length <= 64);

/** The frame, or why it is not one. Refs as numbers are accepted and read as text. */
export function decodeFrame(message: unknown): Frame | { error: string } {
  let value = message;
  if (typeof value === "string") {
    try {
      value = JSON.parse(value);
    } catch {
      return { error: "the frame is not JSON" };
    }
  }
  if (!Array.isArray(value) || value.length !== 5)
    return { error: "a frame is a JSON array [join_ref, ref, topic, event, payload]" };
  const [rawJoinRef, rawRef, topic, event, payload] = value;
  const joinRef = typeof rawJoinRef === "number" ? String(rawJoinRef) : rawJoinRef;
  const ref = typeof rawRef === "number" ? String(rawRef) : rawRef;
  if (!isRef(joinRef) || !isRef(ref)) return { error: "join_ref and ref must be strings or null" };
  if (typeof topic !== "string" || topic === "") return { error: "topic must be a non-empty string" };
  if (typeof event !== "string" || event === "") return { error: "event must be a non-empty string" };
  return { joinRef, ref, topic, event, payload };
}

/**
 * Why a well-formed frame is refused unhandled, with an error reply (the socket stays open,
 * and the client's join or push learns why), or undefined.
 */
export function oversized(frame: Frame): { reason: string; message: string } | undefined {
  if (frame.topic.length > MAX_TOPIC_LENGTH)
    return {
      reason: "topic too long",
      message: `topic: at most ${MAX_TOPIC_LENGTH} characters, got ${frame.topic.length}`,
    };
  if (frame.event.length > MAX_EVENT_LENGTH)
    return {
      reason: "event too long",
      message: `event: at most ${MAX_EVENT_LENGTH} characters, got ${frame.event.length}`,
    };
  return undefined;
}

export function encodeFrame(
  joinRef: string | null,
  ref: string | null,
  topic: string,
  event: string,
  payload: unknown,
): string {
  return JSON.stringify([joinRef, ref, topic, event, payload]);
}

/** `phx_reply` to a push: `{ status, response }`. */
export function replyFrame(frame: Frame, status: "ok" | "error", response: unknown): string {
  return encodeFrame(frame.joinRef, frame.ref, frame.topic, "phx_reply", { status, response });
}

/** A broadcast to everyone on a topic. */
export function broadcastFrame(topic: string, event: string, payload: unknown): string {
  return encodeFrame(null, null, topic, event, payload);
}

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
