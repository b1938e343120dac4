/**
 * The local operator's socket on a running Parley, started as an operator starts it: on the
 * embedded database a socket another process answers on is left alone, and on PostgreSQL
 * exactly one of the supervisor's API processes serves it. Requests on the socket act as
 * local:<uid>; nothing sent over TCP does. On the embedded Parley killed outright and started
 * again (test/e2e/killed.test.ts), the socket it left is replaced and then works.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { ADMIN, exercise, local, socketOf } from "../support/local-socket";
import { type Parley, startParley, within } from "../support/parley";
import { childPids, commandLine } from "../support/wait";

const started: Parley[] = [];

afterAll(async () => {
  await Promise.all(started.map((parley) => parley.close()));
});

async function start(options: Parameters<typeof startParley>[0]): Promise<Parley> {
  const parley = await startParley(options);
  started.push(parley);
  return parley;
}

/** The pids, one a line, of the supervisor's children told to serve the socket. */
const servingSocket = (parley: Parley) =>
  childPids(parley.process.pid)
    .filter((pid) => commandLine(pid).includes("local-socket"))
    .join("\n");

describe("the local socket beside a running Parley", () => {
  test("a socket another process answers on is left alone", async () => {
    const { mkdtempSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const dataDir = mkdtempSync(join(tmpdir(), "parley-socket-"));
    const path = join(dataDir, "parley.sock");
    const other = Bun.serve({ unix: path, fetch: () => new Response("the other one") });
    try {
      const parley = await start({ embedded: true, dataDir });
      await within(parley, "the warning about the other socket", 10_000, async () =>
        parley.tail(200).includes("another Parley answers on the local socket") ? true : undefined,
      );
      const response = await fetch("http://localhost/", { unix: path });
      expect(await response.text()).toBe("the other one");
    } finally {
      other.stop(true);
    }
  }, 120_000);

  test("PostgreSQL: one of the API processes serves the socket", async () => {
    const parley = await start({ embedded: false, env: { API_PROCESSES: "2", SIP_ENABLED: "false" } });
    await within(parley, "the socket", 15_000, async () => (existsSync(socketOf(parley)) ? true : undefined));
    await exercise(parley);
    expect(parley.tail(500).split("local operator socket listening").length - 1).toBe(1);

    // Killed, the process serving it is restarted by the supervisor, socket and all.
    const serving = servingSocket(parley);
    expect(serving).toMatch(/^\d+$/);
    process.kill(Number(serving), "SIGKILL");
    const back = await within(parley, "the socket served again by a new process", 30_000, async () => {
      const answer = await local(parley, "GET", `${ADMIN}/accounts`);
      const now = servingSocket(parley);
      return answer.status === 200 && now !== serving ? now : undefined;
    });
    expect(back).toMatch(/^\d+$/);
  }, 120_000);
});
