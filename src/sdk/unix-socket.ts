/** Reaching a Parley through its local operator socket (DATA_DIR/parley.sock): checks, and a fetch over it. */
import { lstat } from "node:fs/promises";
import { request as httpRequest } from "node:http";
import { connect } from "node:net";

/** Why the socket cannot be used: absent (no Parley here), stale (nothing listens), or not safe to trust. */
export class SocketProblem extends Error {
  constructor(
    readonly kind: "absent" | "stale" | "unsafe",
    message: string,
  ) {
    super(message);
  }
}

function listening(path: string): Promise<boolean> {
  return new Promise((done) => {
    const socket = connect({ path });
    socket.setTimeout(2_000);
    socket.on("connect", () => socket.end(() => done(true)));
    socket.on("error", () => done(false));
    socket.on("timeout", () => {
      socket.destroy();
      done(false);
    });
  });
}

/**
 * Resolves when `path` is a socket of this user, mode 0600, that a process answers on;
 * otherwise rejects with the SocketProblem. Anyone who can replace the file could answer
 * as Parley, so a socket of another owner or wider mode is refused, not used.
 */
export async function checkSocket(path: string): Promise<void> {
  const stats = await lstat(path).catch(() => undefined);
  if (!stats) throw new SocketProblem("absent", `no socket at ${path}`);
  if (!stats.isSocket()) throw new SocketProblem("unsafe", `${path} is not a socket`);
  const uid = process.getuid?.();
  if (uid !== undefined && stats.uid !== uid)
    throw new SocketProblem(
      "unsafe",
      `${path} belongs to uid ${stats.uid}, not to you (uid ${uid}): run as the user Parley runs as`,
    );
  if ((stats.mode & 0o777) !== 0o600)
    throw new SocketProblem(
      "unsafe",
      `${path} has mode ${(stats.mode & 0o777).toString(8)}, not 600: refusing to trust it`,
    );
  if (!(await listening(path))) {
    throw new SocketProblem(
      "stale",
      `${path} exists but nothing listens on it: the Parley that ` +
        "made it has stopped (it removes the file when it starts again)",
    );
  }
}

/** A fetch whose requests go to the HTTP server on a Unix socket, whatever host the URL names. */
export function unixSocketFetch(path: string): (request: Request) => Promise<Response> {
  return async (request) => {
    const body = request.body ? Buffer.from(await request.arrayBuffer()) : undefined;
    const url = new URL(request.url);
    const headers: Record<string, string> = { host: "localhost" };
    request.headers.forEach((value, name) => {
      headers[name] = value;
    });
    if (body) headers["content-length"] = String(body.length);
    return new Promise<Response>((resolve, reject) => {
      const outgoing = httpRequest(
        { socketPath: path, method: request.method, path: url.pathname + url.search, headers },
        (incoming) => {
          const chunks: Buffer[] = [];
          incoming.on("data", (chunk: Buffer) => chunks.push(chunk));
          incoming.on("error", reject);
          incoming.on("end", () => {
            const answerHeaders = new Headers();
            for (const [name, value] of Object.entries(incoming.headers)) {
              if (value !== undefined) answerHeaders.set(name, Array.isArray(value) ? value.join(", ") : value);
            }
            const status = incoming.statusCode ?? 502;
            resolve(
              new Response(status === 204 || status === 304 ? null : Buffer.concat(chunks), {
                status,
                headers: answerHeaders,
              }),
            );
          });
        },
      );
      outgoing.on("error", reject);
      outgoing.end(body);
    });
  };
}
