import { readFileSync } from "node:fs";
import { createServer } from "node:net";

/**
 * The ports freePort has handed out in this process: the kernel may give a port it just closed
 * to the next bind to port 0, so three picks for one Parley (HTTP, SIP, metrics) once came out
 * as one port, and its SIP listener failed to bind beside its HTTP one.
 */
const handedOut = new Set<number>();

/** A TCP port on 127.0.0.1 that nothing listens on right now, and that this process was not given before. */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = await unusedPort();
    if (!handedOut.has(port)) {
      handedOut.add(port);
      return port;
    }
  }
}

function unusedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** Whether a UDP socket of this machine is bound to `port` (on any address), as /proc/net/udp and udp6 list them. */
export function udpBound(port: number): boolean {
  const hex = port.toString(16).toUpperCase().padStart(4, "0");
  return ["/proc/net/udp", "/proc/net/udp6"].some((table) => {
    try {
      // Each line's second field is the local address, `0100007F:1F90`.
      return readFileSync(table, "utf8")
        .split("\n")
        .some((line) => line.trim().split(/\s+/)[1]?.split(":")[1] === hex);
    } catch {
      return false;
    }
  });
}
