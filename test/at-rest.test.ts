/**
 * What a second local user finds of a Parley started without SIGNING_KEY_SECRET, as an outside
 * review checked it: a real user of the machine (`useradd -M`), who reads nothing in DATA_DIR, and
 * the bytes of the data folder (the embedded database's files and WAL) or a dump of PostgreSQL,
 * where no private key member and no webhook secret appears in plain text. A data folder an older
 * Parley left readable is closed at start; rows it stored in plain text are sealed at start.
 */
import { afterAll, describe, expect, test } from "bun:test";
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { eq, sql } from "drizzle-orm";
import { decodeProtectedHeader, importJWK, jwtVerify } from "jose";
import { signingKeys, webhookEndpoints } from "../drizzle/schema";
import { db } from "../src/db/client";
import { rowsOf } from "../src/db/rows";
import { openPrivateKey } from "../src/modules/accounts/sealing";
import { createAccount } from "../src/modules/accounts/service";
import { createEndpoint } from "../src/modules/webhooks/service";
import { http, migratedDataDir, type Parley, startParley } from "./support/parley";
import { startReceiver } from "./support/webhook-receiver";
import { until } from "./support/wait";

/** A local user who is not Parley's: made once on this machine, with no home. */
const OTHER_USER = "parley-other";
if (Bun.spawnSync(["id", "-u", OTHER_USER]).exitCode !== 0) {
  const made = Bun.spawnSync(["useradd", "-M", "-s", "/usr/sbin/nologin", OTHER_USER], { stderr: "pipe" });
  if (made.exitCode !== 0) throw new Error(`useradd ${OTHER_USER}: ${made.stderr.toString()}`);
}

/** Runs a command as the other user; its exit code and what it said. */
function asOtherUser(...command: string[]) {
  const run = Bun.spawnSync(["runuser", "-u", OTHER_USER, "--", ...command], { stdout: "pipe", stderr: "pipe" });
  return { code: run.exitCode, said: run.stdout.toString() + run.stderr.toString() };
}

/** Every entry under `dir` (itself included) whose mode lets group or others in. */
function openEntries(dir: string): string[] {
  const found: string[] = [];
  const visit = (path: string) => {
    const entry = lstatSync(path);
    if ((entry.mode & 0o077) !== 0 && !entry.isSymbolicLink())
      found.push(`${(entry.mode & 0o777).toString(8)} ${path}`);
    if (entry.isDirectory()) for (const name of readdirSync(path)) visit(join(path, name));
  };
  visit(dir);
  return found;
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? filesUnder(join(dir, entry.name)) : entry.isFile() ? [join(dir, entry.name)] : [],
  );
}

/**
 * What of a private key or a webhook secret the bytes show in plain text: a JWK's private members
 * as JSON text (`"dp"`) or as PostgreSQL's binary jsonb lays out an RSA key's keys (`dpdqqi`), and
 * any `whsec_` secret.
 */
function secretsIn(bytes: string): string[] {
  const found = bytes.match(/"(dp|qi|d)"\s*:|dpdqqi|whsec_[A-Za-z0-9+/=]{30,}/g) ?? [];
  return [...new Set(found)];
}

/** A folder whose own parents any user may cross, so that only its own modes keep the other user out. */
function reachableFolder(): string {
  const parent = mkdtempSync(join(tmpdir(), "parley-at-rest-"));
  chmodSync(parent, 0o755);
  return parent;
}

const started: Parley[] = [];
const folders: string[] = [];
afterAll(async () => {
  for (const parley of started) await parley.close();
  for (const folder of folders) rmSync(folder, { recursive: true, force: true });
});

/** A token verified against the account's published key, as a media server would. */
async function verifiedToken(parley: Parley, apiKey: string): Promise<void> {
  const issued = await http(parley, "POST", "/api/v1/misc/generate-token", {
    body: { apiKey, user: { id: "alice", name: "Alice" } },
  });
  expect(issued.status).toBe(200);
  const { kid } = decodeProtectedHeader(issued.body.token);
  const jwks = await (await fetch(`${parley.base}/.well-known/jwks.json`)).json();
  const jwk = jwks.keys.find((key: { kid: string }) => key.kid === kid);
  expect(jwk).toBeDefined();
  await jwtVerify(issued.body.token, await importJWK(jwk, jwk.alg));
}

describe("the embedded default, started without SIGNING_KEY_SECRET on a data folder an older Parley left open", () => {
  test("every entry becomes private, the other user reads nothing, and no secret rests in plain text", async () => {
    const parent = reachableFolder();
    folders.push(parent);
    const dataDir = join(parent, "data");
    mkdirSync(dataDir);
    // As PGlite made them by itself, and an older Parley left them: files 0666, folders 0755.
    await migratedDataDir(dataDir);
    writeFileSync(join(dataDir, "notes.txt"), "left here");
    mkdirSync(join(dataDir, "extra"));
    const loosen = (path: string) => {
      const folder = lstatSync(path).isDirectory();
      chmodSync(path, folder ? 0o755 : 0o666);
      if (folder) for (const name of readdirSync(path)) loosen(join(path, name));
    };
    loosen(dataDir);
    expect(openEntries(dataDir).length).toBeGreaterThan(100);

    const env = { SIP_ENABLED: "false", BOOTSTRAP_ACCOUNT: "true", SIGNING_KEY_SECRET: "" };
    const first = await startParley({ embedded: true, dataDir, env });
    started.push(first);
    const said = first.tail(400);
    const tightened = said.split("\n").find((line) => line.includes("made the data folder private"));
    expect(tightened).toBeDefined();
    expect(JSON.parse(tightened!).entries).toBeGreaterThan(100);

    const apiKey = await first.firstApiKey();
    let secret = "";
    const receiver = await startReceiver(() => secret);
    try {
      const endpoint = await http(first, "POST", "/api/v1/webhooks", { auth: apiKey, body: { url: receiver.url } });
      expect(endpoint.status).toBe(201);
      secret = endpoint.body.secret;
      expect(secret).toStartWith("whsec_");
      await verifiedToken(first, apiKey);

      // The key file is the operator's alone, and the other user can neither list the folder nor read a file.
      const keyFile = join(dataDir, "sealing-key");
      expect(lstatSync(keyFile).mode & 0o777).toBe(0o600);
      expect(openEntries(dataDir)).toEqual([]);
      expect(asOtherUser("ls", dataDir).code).not.toBe(0);
      expect(asOtherUser("cat", keyFile).code).not.toBe(0);
      expect(asOtherUser("cat", join(dataDir, "PG_VERSION")).code).not.toBe(0);
      expect(asOtherUser("cat", join(dataDir, "notes.txt")).code).not.toBe(0);
      // Reachable once the folder's own mode is loosened: the refusals above are the folder's doing.
      expect(asOtherUser("ls", parent).code).toBe(0);

      expect(await first.stop("SIGTERM", 20_000)).toBe(0);
      started.pop();
      // Every byte the embedded database wrote, its WAL included.
      const files = filesUnder(dataDir);
      expect(files.some((file) => file.includes("pg_wal"))).toBe(true);
      const bytes = files.map((file) => readFileSync(file, "latin1")).join("\n");
      // The rows themselves were among the bytes read: sealed.
      expect(bytes).toContain("A256GCM");
      expect(secretsIn(bytes)).toEqual([]);
      expect(bytes).not.toContain(secret);
      expect(openEntries(dataDir)).toEqual([]);

      // Started again on the same folder: the same keys open, tokens verify and deliveries are signed.
      const second = await startParley({ embedded: true, dataDir, env });
      started.push(second);
      await verifiedToken(second, apiKey);
      const booked = await http(second, "POST", "/api/v1/scheduler/reservation", {
        auth: apiKey,
        body: { mail_owner: "o@example.com", name: "Sealed", duration: 60, start_time: "2030-01-15T10:00" },
      });
      expect(booked.status).toBeLessThan(300);
      const [delivered] = await until(
        () => receiver.received,
        (list) => list.length >= 1,
        20_000,
      );
      expect(delivered!.verified).toBe(true);
    } finally {
      receiver.stop();
    }
  }, 150_000);
});

describe("on PostgreSQL, started without SIGNING_KEY_SECRET on rows an older Parley stored in plain text", () => {
  test("the rows are sealed once, the dump shows no secret, and the keys still sign", async () => {
    // Rows as an older Parley stored them: made here, then put back in plain text.
    const { account, apiKey, kid } = await createAccount("plain");
    const [stored] = await db.select().from(signingKeys).where(eq(signingKeys.kid, kid));
    await db
      .update(signingKeys)
      .set({ privateJwk: openPrivateKey(stored!.privateJwk) })
      .where(eq(signingKeys.kid, kid));
    const { endpoint, secret } = await createEndpoint(account.id, { url: "http://127.0.0.1:9/hook" });
    const previous = "whsec_cHJldmlvdXMtc2VjcmV0LWJlZm9yZS10aGUtcm90YXRpb24=";
    await db
      .update(webhookEndpoints)
      .set({ secret: { secret }, previousSecret: { secret: previous } })
      .where(eq(webhookEndpoints.id, endpoint.id));
    const dump = () =>
      Bun.spawnSync(["pg_dump", "--data-only", process.env.DATABASE_URL!], { stdout: "pipe" }).stdout.toString();
    expect(secretsIn(dump()).length).toBeGreaterThan(0);

    const parent = reachableFolder();
    folders.push(parent);
    const dataDir = join(parent, "data");
    const env = { SIP_ENABLED: "false", API_PROCESSES: "1", SIGNING_KEY_SECRET: "" };
    const parley = await startParley({ embedded: false, dataDir, env });
    started.push(parley);
    const sealedLine = await until(
      () =>
        parley
          .tail(400)
          .split("\n")
          .find((line) => line.includes("sealed the secrets stored in plain text")),
      Boolean,
      10_000,
    );
    expect(sealedLine).toBeDefined();
    expect(JSON.parse(sealedLine!)).toMatchObject({ signingKeys: 1, webhookEndpoints: 1 });

    const [row] = await db.select().from(signingKeys).where(eq(signingKeys.kid, kid));
    expect(row!.privateJwk.sealed).toBe("A256GCM");
    const [hook] = await db.select().from(webhookEndpoints).where(eq(webhookEndpoints.id, endpoint.id));
    expect(hook!.secret.sealed).toBe("A256GCM");
    expect(hook!.previousSecret!.sealed).toBe("A256GCM");
    expect(secretsIn(dump())).toEqual([]);
    const plainRows = rowsOf<{ n: number }>(
      await db.execute(sql`select count(*)::int as n from signing_keys where private_jwk ->> 'sealed' is null`),
    );
    expect(plainRows[0]!.n).toBe(0);

    // DATA_DIR, made by this start, holds the sealing key for the operator alone.
    expect(lstatSync(dataDir).mode & 0o777).toBe(0o700);
    expect(lstatSync(join(dataDir, "sealing-key")).mode & 0o777).toBe(0o600);
    expect(openEntries(dataDir)).toEqual([]);
    expect(asOtherUser("cat", join(dataDir, "sealing-key")).code).not.toBe(0);
    await verifiedToken(parley, apiKey.apiKey);

    expect(await parley.stop("SIGTERM", 20_000)).toBe(0);
    started.pop();

    // The key file lost: the next start refuses, says what to do, and leaves no new key behind.
    const keyFile = join(dataDir, "sealing-key");
    renameSync(keyFile, `${keyFile}.kept`);
    const again = Bun.spawn([process.execPath, "src/index.ts"], {
      cwd: join(import.meta.dir, ".."),
      env: parley.env,
      stdout: "pipe",
      stderr: "pipe",
    });
    const killer = setTimeout(() => again.kill("SIGKILL"), 30_000);
    const [code, stderr] = await Promise.all([again.exited, new Response(again.stderr).text()]);
    clearTimeout(killer);
    expect(code).toBe(1);
    expect(stderr).toContain("sealed with another key than");
    expect(stderr).toContain("SIGNING_KEY_SECRET");
    expect(existsSync(keyFile)).toBe(false);
    parley.cleanup();
  }, 90_000);
});

describe("the command line working on the database directly", () => {
  test("refuses, rather than seal under it, a new key that does not open the keys already sealed", async () => {
    // Sealed under the tests' SIGNING_KEY_SECRET, which the command is not given.
    await createAccount("sealed-elsewhere");
    const parent = reachableFolder();
    folders.push(parent);
    const dataDir = join(parent, "elsewhere");
    const env: Record<string, string> = { ...(process.env as Record<string, string>), DATA_DIR: dataDir };
    delete env.SIGNING_KEY_SECRET;
    const command = Bun.spawn([process.execPath, "src/parley.ts", "create-account", "mixed"], {
      cwd: join(import.meta.dir, ".."),
      env,
      stdout: "pipe",
      stderr: "pipe",
    });
    const [code, stderr] = await Promise.all([command.exited, new Response(command.stderr).text()]);
    expect(stderr).toContain("sealed with another key than");
    expect(code).toBe(1);
    expect(existsSync(join(dataDir, "sealing-key"))).toBe(false);
    const mixed = rowsOf<{ n: number }>(
      await db.execute(sql`select count(*)::int as n from accounts where name = 'mixed'`),
    );
    expect(mixed[0]!.n).toBe(0);
  });
});
