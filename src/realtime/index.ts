/**
 * `GET /api/v1/messaging/websocket?token=...&vsn=2.0.0`: the Phoenix-protocol socket. The
 * token (a messaging token from generate-token) is checked before the upgrade, so a bad
 * one is an ordinary 401/403 with the error shape and no socket is opened. The largest
 * frame a client may send is set where the app is built (src/app.ts), since Bun takes it
 * per server, not per route.
 */
import type { ServerWebSocket } from "bun";
import { Elysia, t } from "elysia";
import { AppError } from "../core/errors";
import { Text } from "../http/text";
import { actorFrom } from "../modules/auth/actor";
import { verifyAccessToken } from "../modules/auth/access-token";
import { closeConnection, connectionOf, openConnection } from "./socket";

export const SOCKET_PATH = "/api/v1/messaging/websocket";

export const realtimeController = new Elysia({ name: "parley.realtime", detail: { tags: ["messaging"] } })
  // In transform, before the query is validated: a caller without a valid token learns nothing more.
  .derive(async ({ query, server }) => {
    if (!query.token) throw new AppError("unauthorized", "token: give a messaging token as ?token=");
    const session = await verifyAccessToken(query.token, "messaging");
    if (query.vsn !== undefined && !query.vsn.startsWith("2.")) {
      throw new AppError(
        "bad_request",
        `vsn: only the Phoenix protocol version 2 (2.0.0) is spoken, got "${query.vsn}"`,
      );
    }
    // The server is handed on explicitly: Elysia's context exposes it only to code that names it.
    return { session, bunServer: server };
  })
  .ws(SOCKET_PATH, {
    query: t.Object({ token: t.Optional(Text({ maxLength: 8192 })), vsn: t.Optional(Text({ maxLength: 16 })) }),
    detail: { summary: "Phoenix channels socket (protocol v2): topics chat:<channel_id> and rtc:<channel_id>" },
    open(ws) {
      openConnection(ws.raw as ServerWebSocket<unknown>, ws.data.bunServer as never, actorFrom(ws.data.session));
    },
    message(ws, message) {
      connectionOf(ws.raw as ServerWebSocket<unknown>)?.receive(message);
    },
    async close(ws) {
      await closeConnection(ws.raw as ServerWebSocket<unknown>);
    },
  });
