/**
 * The local operator's socket on a running Parley, started as an operator starts it: on the
 * embedded database (one process) and on PostgreSQL (the supervisor's API processes, of which
 * exactly one serves it). Requests on the socket act as local:<uid>; nothing sent over TCP does.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { http, type Parley, startParley, within } from "../support/parley";
import { childPids, commandLine } from "../support/wait";

const ADMIN = "/api/v1/admin";
const started: Parley[] = [];

afterAll(async () => {
  await Promise.all(started.map((parley) => parley.close()));
});

async function start(options: Parameters<typeof startParley>[0]): Promise<Parley> {
  const parley = await startParley(options);
  started.push(parley);
  return parley;
}

const socketOf = (parley: Parley) => join(parley.dataDir, "parley.sock");

/** The pids, one a line, of the supervisor's children told to serve the socket. */
const servingSocket = (parley: Parley) =>
  childPids(parley.process.pid)
    .filter((pid) => commandLine(pid).includes("local-socket"))
    .join("\n");

/** One request on the Unix socket, as the `parley` command line sends it. */
async function local(parley: Parley, method: string, path: string, body?: unknown) {
  const response = await fetch(`http://localhost${path}`, {
    unix: socketOf(parley),
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(15_000),
  });
  return { status: response.status, body: (await response.json()) as any };
}

/** Headers a TCP client might send hoping to pass for the socket or for loopback. */
const FORGED = {
  "x-forwarded-for": "unix",
  "x-real-ip": "127.0.0.1",
  forwarded: "for=unix;by=parley.sock",
  "x-parley-local": "1",
  host: "localhost",
};

async function exercise(parley: Parley) {
  const path = socketOf(parley);
  const stat = statSync(path);
  expect(stat.isSocket()).toBe(true);
  expect(stat.mode & 0o777).toBe(0o600);
  expect(stat.uid).toBe(process.getuid!());

  // The local operator needs no credential, and its changes are recorded as its own.
  const created = await local(parley, "POST", `${ADMIN}/accounts`, { name: "made-locally" });
  expect(created.status).toBe(201);
  const audit = await local(parley, "GET", `${ADMIN}/audit`);
  const entry = audit.body.entries.find(
    (candidate: { target: string }) => candidate.target === created.body.account.id,
  );
  expect(entry).toMatchObject({
    action: "create-account",
    actor: `local:${process.getuid!()}`,
    actor_kind: "local",
    address: `unix:${path}`,
  });

  // Over TCP the same request, however it is dressed, is refused.
  for (const headers of [{}, FORGED]) {
    const response = await fetch(`${parley.base}${ADMIN}/accounts`, {
      method: "POST",
      headers: { ...headers, "content-type": "application/json" },
      body: JSON.stringify({ name: "forged" }),
    });
    expect(response.status).toBe(401);
    expect(((await response.json()) as any).error.code).toBe("operator_credential_required");
  }

  // A token made on the socket works from a script over TCP, recorded with its name and address.
  const token = await local(parley, "POST", `${ADMIN}/operator-tokens`, { name: "deploy-script", scope: "full" });
  expect(token.status).toBe(201);
  const viaToken = await http(parley, "POST", `${ADMIN}/accounts/${created.body.account.id}/numbers`, {
    body: { country: "US", number: "+1 555 0123" },
    auth: `Bearer ${token.body.token}`,
  });
  expect(viaToken.status).toBe(201);
  const tokenEntry = (await local(parley, "GET", `${ADMIN}/audit?limit=1`)).body.entries[0];
  expect(tokenEntry).toMatchObject({
    action: "add-number",
    actor: "deploy-script",
    actor_kind: "token",
    address: "127.0.0.1",
    target: created.body.account.id,
  });
  // The refold answers over TCP too, with the idle timeout lifted for it.
  const refolded = await http(parley, "POST", `${ADMIN}/refold-usage`, {
    body: {},
    auth: `Bearer ${token.body.token}`,
  });
  expect(refolded.status).toBe(200);
  expect(refolded.body.events).toBeNumber();
  const createdToken = (await local(parley, "GET", `${ADMIN}/operator-tokens`)).body.tokens.find(
    (row: { id: number }) => row.id === token.body.id,
  );
  expect(createdToken.created_by).toBe(`local:${process.getuid!()}`);
}

describe("the local socket beside a running Parley", () => {
  /** The Parley started after a killed one: the next test goes on with it, as a start costs seconds of PGlite. */
  let restarted: Parley | undefined;

  test("embedded: a socket left by a killed Parley is replaced at the next start", async () => {
    const first = await start({ embedded: true });
    await first.stop("SIGKILL", 10_000);
    expect(existsSync(socketOf(first))).toBe(true);
    const again = await start({ embedded: true, dataDir: first.dataDir });
    const answer = await local(again, "GET", `${ADMIN}/accounts`);
    expect(answer.status).toBe(200);
    restarted = again;
  }, 120_000);

  test("embedded: the socket works while Parley holds the database, and goes away when it stops", async () => {
    const parley = restarted ?? (await start({ embedded: true }));
    await exercise(parley);
    expect(await parley.stop("SIGTERM", 15_000)).toBe(0);
    expect(existsSync(socketOf(parley))).toBe(false);
  }, 120_000);

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
