/**
 * The local operator's socket of a running Parley (DATA_DIR/parley.sock), as the `parley`
 * command line uses it: requests on it act as local:<uid>; nothing sent over TCP does.
 */
import { expect } from "bun:test";
import { statSync } from "node:fs";
import { join } from "node:path";
import { http, type Parley } from "./parley";

export const ADMIN = "/api/v1/admin";

export const socketOf = (parley: Parley) => join(parley.dataDir, "parley.sock");

/** One request on the Unix socket, as the `parley` command line sends it. */
export async function local(parley: Parley, method: string, path: string, body?: unknown) {
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

/**
 * The socket's checks on a running Parley: its file's owner and mode, the local operator's
 * changes recorded as its own, the same requests refused over TCP however they are dressed,
 * and a token made on the socket working over TCP.
 */
export async function exercise(parley: Parley) {
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
