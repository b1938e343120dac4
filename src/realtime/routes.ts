/**
 * `GET /api/v1/messaging/websocket?token=...&vsn=2.0.0`: the Phoenix-protocol socket. The
 * token (a messaging token from generate-token) is checked before the upgrade, so a bad
 * one is an ordinary 401/403 with the error shape and no socket is opened. The largest
 * frame a client may send is set where the app is built (src/process/app.ts), since Bun takes it
 * per server, not per route.
 */
import { Elysia, t } from "elysia";
import { AppError } from "../core/errors";
import { errorAnswers } from "../http/openapi";
import { Text } from "../http/text";
import { actorFrom, verifyAccessToken } from "../modules/auth";
import { credentialCounter } from "../modules/limits";
import { attachServer } from "./local-broker";
import { Connection } from "./socket";
import { socketCaps } from "./socket-caps";

export const SOCKET_PATH = "/api/v1/messaging/websocket";

/** The frames in words, for the OpenAPI description, which has no way to describe a socket's messages. */
const SOCKET_DESCRIPTION = `A WebSocket upgrade (\`Upgrade: websocket\`) that speaks the Phoenix channels protocol,
version 2, so the \`phoenix\` npm client works unchanged (docs/realtime.md). The token is checked before the
upgrade: a bad one is answered 401 or 403 in the error shape and no socket opens.

Every frame, both ways, is a JSON array \`[join_ref, ref, topic, event, payload]\`:
- \`phx_join\` on \`chat:<channel_id>\` (a stored room the user may enter) or \`rtc:<channel_id>\` (relayed, not stored)
  joins; the answer is \`phx_reply\` with \`{status: "ok" | "error", response}\`. \`phx_leave\` leaves (then
  \`phx_close\`); \`heartbeat\` on topic \`phoenix\` is answered \`phx_reply {status: "ok", response: {}}\`.
- After a chat join: \`presence_state\`, \`archived_message_count {count}\` and that many \`archived_message\`
  (oldest first); everyone gets \`user_joined\` and \`presence_diff\`.
- Pushes on chat: \`new_message {content, content_type?, options?, parent_id?}\` (reply \`{message}\`, broadcast
  \`new_message\`) and \`new_vote {message_id, answer}\` (reply \`{poll_answer}\`, broadcast \`new_vote\`). REST
  edits and deletes broadcast \`message_updated\` and \`message_deleted\`; leaving broadcasts \`user_left\`.
- On rtc, any other event is relayed to the other members with \`from\` set to the sender's user id.
- \`phx_join\` on \`events:<account_id>\` (a token whose scope covers the platform: \`parley\` or empty; payload
  \`{after?: <sequence>}\`) hears the account's catalogue events, each as an event named by its type with the event
  log's JSON as payload; it takes no pushes.
- Broadcasts carry null refs. A frame larger than the server's limit closes the socket with 1009.`;

export const realtimeController = new Elysia({ name: "parley.realtime", detail: { tags: ["messaging"] } })
  // In transform, before the query is validated: a caller without a valid token learns nothing more.
  .derive(async ({ query }) => {
    if (!query.token) throw new AppError("unauthorized", "token: give a messaging token as ?token=");
    const session = await verifyAccessToken(query.token, "messaging");
    if (query.vsn !== undefined && !query.vsn.startsWith("2.")) {
      throw new AppError(
        "bad_request",
        `vsn: only the Phoenix protocol version 2 (2.0.0) is spoken, got "${query.vsn}"`,
      );
    }
    // The socket's slot of the caps is taken here, before the upgrade, so a refusal is an HTTP answer.
    return { connection: new Connection(actorFrom(session), credentialCounter(query.token)) };
  })
  /*
   * A route of Elysia's method "WS" (what `.ws()` registers, so the router, the OpenAPI
   * document and the pipeline's hooks treat it alike), upgraded here rather than by `.ws()`:
   * `.ws()` keeps the whole request context (the Request, its headers, its closures) as every
   * socket's data, about 2.6 KiB each. Here the socket's data is its Connection alone, whose
   * open, message and close are what the app's Bun handlers call (socket.ts).
   */
  .route(
    "WS",
    SOCKET_PATH,
    ({ request, server, connection }) => {
      if (server) attachServer(server);
      if (server?.upgrade(request, { data: connection })) return;
      connection.release();
      throw new AppError("bad_request", "not a WebSocket handshake: send Upgrade: websocket with Sec-WebSocket-Key");
    },
    {
      query: t.Object({
        token: t.Optional(Text({ maxLength: 8192, description: "A messaging token from generate-token (required)" })),
        vsn: t.Optional(
          Text({ maxLength: 16, description: "The Phoenix protocol version: 2.0.0, the client's default" }),
        ),
      }),
      detail: {
        summary:
          "Phoenix channels socket (protocol v2): topics chat:<channel_id>, rtc:<channel_id>, events:<account_id>",
        description: SOCKET_DESCRIPTION,
        responses: {
          101: { description: "Switching Protocols: the connection is now a WebSocket speaking Phoenix protocol v2" },
          ...errorAnswers("400", "401", "403", "503"),
          // The caps on open sockets (docs/limits.md#caps).
          ...socketCaps.answers(),
        },
      },
    },
  );
