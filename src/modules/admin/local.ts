/**
 * The local operator's way in: a Unix socket in the data folder (mode 0600, so only the user
 * Parley runs as, and root, can connect). A request that arrives on it acts as `local:<uid>`
 * with full scope and needs no credential; on the socket the command line serves for its own
 * command in direct mode (src/parley.ts), as `local:<uid>:direct`, so the audit log tells the
 * two apart. The mark is the Request object itself, held in a WeakMap by the socket's own
 * server before the app sees it: nothing a TCP client sends (no header, no address) can put a
 * request there.
 */
import { chmodSync, existsSync, lstatSync, mkdirSync, unlinkSync } from "node:fs";
import { connect } from "node:net";
import { resolve } from "node:path";
import { config } from "../../core/config";
import { log } from "../../core/log";
import type { Operator } from "../audit";

const localRequests = new WeakMap<Request, Operator>();

export const SOCKET_NAME = "parley.sock";
/** The argument by which the supervisor picks the one API process that serves the socket. */
export const LOCAL_SOCKET_FLAG = "--local-socket";

export function socketPath(): string {
  return resolve(config.database.dataDir, SOCKET_NAME);
}

export function isLocalRequest(request: Request): boolean {
  return localRequests.has(request);
}

/** Who a request on the local socket acts as; undefined for any other request. */
export function localOperatorOf(request: Request): Operator | undefined {
  return localRequests.get(request);
}

/** The local operator: the user Parley runs as; `direct` for the command line's own socket. */
export function localOperator(mode: "serving" | "direct" = "serving"): Operator {
  const name = `local:${process.getuid?.() ?? "unknown"}`;
  return { kind: "local", name: mode === "direct" ? `${name}:direct` : name, scope: "full" };
}

/** Whether a process answers on the socket: refused or absent means the file is stale. */
function answers(path: string): Promise<boolean> {
  return new Promise((done) => {
    const socket = connect({ path, timeout: 1_000 }, () => socket.end(() => done(true)));
    socket.on("error", () => done(false));
    socket.on("timeout", () => {
      socket.destroy();
      done(false);
    });
  });
}

export interface LocalSocket {
  path: string;
  stop(): Promise<void>;
}

/**
 * Serves `handle` on DATA_DIR/parley.sock, its requests acting as `operator`. A socket file
 * left by a process that died is removed; one another running Parley answers on, or a file
 * that is no socket, is left alone, and this process serves none (undefined). Nor does it
 * when the socket cannot be made (its folder cannot be made, say): the API runs on without it.
 */
export async function serveLocalSocket(
  handle: (request: Request) => Response | Promise<Response>,
  operator: Operator = localOperator(),
): Promise<LocalSocket | undefined> {
  const path = socketPath();
  if (existsSync(path)) {
    if (!lstatSync(path).isSocket()) {
      log.warn({ path }, "the local socket's path holds another kind of file; no local socket");
      return undefined;
    }
    if (await answers(path)) {
      log.warn({ path }, "another Parley answers on the local socket; this one serves none");
      return undefined;
    }
    unlinkSync(path);
  }
  const failed = (error: unknown) => {
    log.error(
      { path, err: (error as Error).message },
      "the local socket could not be made; the admin API takes operator tokens only",
    );
    return undefined;
  };
  try {
    // With PostgreSQL nothing else may have made the data folder yet.
    mkdirSync(config.database.dataDir, { recursive: true });
  } catch (error) {
    return failed(error);
  }
  // The umask makes the socket 0600 from the moment it exists: a chmod after bind would leave
  // a moment in which another user could connect.
  const umask = process.umask(0o177);
  let server: ReturnType<typeof Bun.serve>;
  try {
    server = Bun.serve({
      unix: path,
      // As on TCP: the pipeline keeps MAX_BODY_BYTES itself, in the error shape.
      maxRequestBodySize: Number.MAX_SAFE_INTEGER,
      fetch(request, socketServer) {
        // A refold of a long event log answers when done: the connection waits for it.
        socketServer.timeout(request, 0);
        localRequests.set(request, operator);
        return handle(request);
      },
    });
  } catch (error) {
    return failed(error);
  } finally {
    process.umask(umask);
  }
  chmodSync(path, 0o600);
  log.info({ path }, "local operator socket listening");
  return {
    path,
    async stop() {
      await server.stop(true);
      // Bun leaves the file behind; the next start would have to find it stale.
      if (existsSync(path)) unlinkSync(path);
    },
  };
}
