/**
 * The webhooks worker's HTTP/1.1 client (src/modules/webhooks/http1.ts) against receivers that
 * answer byte by byte as the test scripts them: how each framing of an answer is read, when a
 * connection is kept and used again, and what an attempt answers when the receiver fails it.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Socket } from "bun";
import { type Destination, post } from "../../src/modules/webhooks/http1";
import { selfSignedCertificate } from "../support/certificate";
import { freePort } from "../support/ports";

interface Peer {
  buffer: string;
  connection: number;
}

/**
 * A receiver on a raw socket: each request is read whole (by its Content-Length) and handed to
 * `answer` with its number on the connection, which writes what it likes back.
 */
function receiver(answer: (socket: Socket<Peer>, request: { text: string; onConnection: number }) => void) {
  let connections = 0;
  const requests: Array<{ text: string; connection: number }> = [];
  const perConnection = new Map<number, number>();
  const server = Bun.listen<Peer>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(socket) {
        socket.data = { buffer: "", connection: ++connections };
      },
      data(socket, chunk) {
        socket.data.buffer += chunk.toString("latin1");
        for (;;) {
          const end = socket.data.buffer.indexOf("\r\n\r\n");
          if (end < 0) return;
          const length = Number(/content-length: (\d+)/i.exec(socket.data.buffer.slice(0, end))?.[1] ?? 0);
          if (socket.data.buffer.length < end + 4 + length) return;
          const text = socket.data.buffer.slice(0, end + 4 + length);
          socket.data.buffer = socket.data.buffer.slice(text.length);
          const onConnection = (perConnection.get(socket.data.connection) ?? 0) + 1;
          perConnection.set(socket.data.connection, onConnection);
          requests.push({ text, connection: socket.data.connection });
          answer(socket, { text, onConnection });
        }
      },
    },
  });
  return {
    destination: (): Destination => ({
      address: "127.0.0.1",
      port: server.port,
      tls: false,
      serverName: "127.0.0.1",
      host: `receiver.test:${server.port}`,
      target: "/hooks?from=parley",
    }),
    connections: () => connections,
    requests,
    stop: () => server.stop(true),
  };
}

const send = (destination: Destination, timeoutMs = 5_000) =>
  post(destination, { "content-type": "application/json", "webhook-id": "msg_1" }, '{"a":"é"}', timeoutMs, 1024);

test("a connection is kept and used again, and each framing of an answer is read to its end", async () => {
  const pieces = async (socket: Socket<Peer>, parts: string[]) => {
    // Apart in time, so the client reads an answer that arrives in pieces.
    for (const part of parts) {
      socket.write(part);
      await Bun.sleep(5);
    }
  };
  const peer = receiver((socket, { onConnection }) => {
    if (onConnection === 1) socket.write("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nthanks");
    if (onConnection === 2)
      void pieces(socket, [
        "HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\ntha",
        "\r\n",
        "3\r\nnks\r\n0\r\nX-Trailer: yes\r\n",
        "\r\n",
      ]);
    if (onConnection === 3) void pieces(socket, ["HTTP/1.1 100 Continue\r\n\r\n", "HTTP/1.1 204 No Content\r\n\r\n"]);
    if (onConnection === 4) socket.write("HTTP/1.1 410 Gone\r\ncontent-length: 0\r\n\r\n");
  });
  try {
    expect(await send(peer.destination())).toEqual({ status: 200, body: "thanks" });
    expect(await send(peer.destination())).toEqual({ status: 202, body: "thanks" });
    expect(await send(peer.destination())).toEqual({ status: 204, body: "" });
    expect(await send(peer.destination())).toEqual({ status: 410, body: "" });
    expect(peer.connections()).toBe(1);
    // The request as sent: the target, the Host it was given, the length in bytes of a UTF-8 body.
    const [first] = peer.requests;
    expect(first!.text).toStartWith(`POST /hooks?from=parley HTTP/1.1\r\nhost: receiver.test:`);
    expect(first!.text).toContain("webhook-id: msg_1\r\n");
    expect(first!.text).toEndWith('content-length: 10\r\n\r\n{"a":"é"}'.replace("é", "\u00c3\u00a9"));
  } finally {
    peer.stop();
  }
});

test("a body larger than the socket takes at once goes whole, the rest as the socket drains", async () => {
  const peer = receiver((socket, { text }) => {
    socket.write(`HTTP/1.1 200 OK\r\nContent-Length: ${String(text.length).length}\r\n\r\n${text.length}`);
  });
  try {
    const body = `"${"é".repeat(4_000_000)}"`;
    const answer = await post(peer.destination(), {}, body, 30_000, 1024);
    const [request] = peer.requests;
    // Each é is two bytes, as the receiver counts them.
    expect(request!.text).toEndWith(`content-length: 8000002\r\n\r\n"${"\u00c3\u00a9".repeat(4_000_000)}"`);
    expect(answer).toEqual({ status: 200, body: String(request!.text.length) });
  } finally {
    peer.stop();
  }
});

test("an answer without a length is read until the close; one that asks to close is not kept", async () => {
  const peer = receiver((socket, { onConnection }) => {
    if (socket.data.connection === 1) {
      socket.write("HTTP/1.1 500 Internal Server Error\r\n\r\nbroken");
      socket.end();
    } else if (onConnection === 1) socket.write("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok");
    else socket.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  });
  try {
    expect(await send(peer.destination())).toEqual({ status: 500, body: "broken" });
    expect(await send(peer.destination())).toEqual({ status: 200, body: "ok" });
    expect(await send(peer.destination())).toEqual({ status: 200, body: "ok" });
    expect(peer.connections()).toBe(3);
  } finally {
    peer.stop();
  }
});

test("a body longer than the log keeps: its first bytes, and the connection is closed, not drained", async () => {
  const peer = receiver((socket) => {
    // The first 2 KiB of 100,000 bytes, the rest never: the answer is what came, not a wait for what did not.
    socket.write(`HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n${"x".repeat(2048)}`);
  });
  try {
    const answer = await send(peer.destination());
    expect(answer.status).toBe(200);
    expect(answer.body).toBe("x".repeat(1024));
    await send(peer.destination());
    expect(peer.connections()).toBe(2);
  } finally {
    peer.stop();
  }
});

test("a kept connection the receiver drops under the next request: sent once more on a new one", async () => {
  const peer = receiver((socket, { onConnection }) => {
    if (socket.data.connection === 1 && onConnection === 2) socket.end();
    else socket.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  });
  try {
    expect(await send(peer.destination())).toEqual({ status: 200, body: "ok" });
    expect(await send(peer.destination())).toEqual({ status: 200, body: "ok" });
    expect(peer.requests.map((request) => request.connection)).toEqual([1, 1, 2]);
  } finally {
    peer.stop();
  }
});

test("no answer in time, no listener, a reply that is not HTTP: each fails the attempt, saying why", async () => {
  const silent = receiver(() => {});
  const garbled = receiver((socket) => {
    socket.write("SSH-2.0-OpenSSH\r\n\r\n");
  });
  const cut = receiver((socket) => {
    socket.write("HTTP/1.1 200 OK\r\nContent-Le");
    socket.end();
  });
  try {
    const started = Date.now();
    const late = await send(silent.destination(), 200).catch((error: Error) => error);
    expect(late).toMatchObject({ name: "TimeoutError", message: "no answer within 200 ms" });
    expect(Date.now() - started).toBeLessThan(3_000);
    // The timed-out connection is not used again.
    await send(silent.destination(), 200).catch(() => {});
    expect(silent.connections()).toBe(2);

    const nobody = { ...silent.destination(), port: await freePort() };
    await expect(send(nobody)).rejects.toThrow(/could not connect to receiver\.test:\d+: ECONNREFUSED/);
    await expect(send(garbled.destination())).rejects.toThrow("the answer is not HTTP/1");
    await expect(send(cut.destination())).rejects.toThrow("the connection closed before an answer");
  } finally {
    silent.stop();
    garbled.stop();
    cut.stop();
  }
});

test("a connection not open within the connect timeout fails the attempt then, not at the answer timeout", async () => {
  // It accepts TCP and never answers: over TLS the handshake never ends, so the connection never opens.
  const silent = receiver(() => {});
  try {
    const started = Date.now();
    const error = await post({ ...silent.destination(), tls: true }, {}, "hello", 10_000, 1024, 200).catch(
      (error: Error) => error,
    );
    expect(error).toMatchObject({ message: "could not connect within 200 ms" });
    expect(Date.now() - started).toBeLessThan(3_000);
  } finally {
    silent.stop();
  }
});

describe("over TLS", () => {
  let dir: string;
  let server: ReturnType<typeof Bun.serve>;
  let certificate: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "parley-http1-"));
    const made = selfSignedCertificate(dir, "/CN=hooks.test", ["-addext", "subjectAltName=DNS:hooks.test"]);
    certificate = made.cert;
    const key = made.key;
    server = Bun.serve({
      hostname: "127.0.0.1",
      port: 0,
      tls: { cert: await Bun.file(certificate).text(), key: await Bun.file(key).text() },
      fetch: async (request) => new Response(`${request.headers.get("host")} ${await request.text()}`),
    });
  });

  afterAll(() => {
    server.stop(true);
    rmSync(dir, { recursive: true, force: true });
  });

  /** Posts from a process of its own that trusts `trusted` (NODE_EXTRA_CA_CERTS is read at start), under `name`. */
  const postFrom = async (trusted: string | undefined, name: string) => {
    const destination: Destination = {
      address: "127.0.0.1",
      port: server.port!,
      tls: true,
      serverName: name,
      host: name,
      target: "/",
    };
    const script =
      `import { post } from ${JSON.stringify(join(import.meta.dir, "../../src/modules/webhooks/http1.ts"))};` +
      `post(${JSON.stringify(destination)}, {}, "hello", 5000, 1024)` +
      ".then((answer) => console.log(JSON.stringify(answer)), " +
      "(error) => console.log(JSON.stringify({ error: error.message })));";
    const child = Bun.spawn([process.execPath, "-e", script], {
      env: { ...process.env, NODE_EXTRA_CA_CERTS: trusted ?? "" },
      stdout: "pipe",
    });
    return JSON.parse(await new Response(child.stdout).text());
  };

  test("a certificate is checked, chain and name, before anything is sent", async () => {
    expect(await postFrom(certificate, "hooks.test")).toEqual({ status: 200, body: "hooks.test hello" });
    expect(await postFrom(certificate, "other.test")).toEqual({
      error: "the TLS handshake failed: ERR_TLS_CERT_ALTNAME_INVALID",
    });
    expect(await postFrom(undefined, "hooks.test")).toEqual({
      error: "the TLS handshake failed: DEPTH_ZERO_SELF_SIGNED_CERT",
    });
  });
});
