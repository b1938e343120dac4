/**
 * The admin API in-process: operator tokens (full, read, revoked), every route refusing an
 * account's credentials, and the audit entry each change leaves.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createHash } from "node:crypto";
import { eq, sql } from "drizzle-orm";
import { overrideConfig } from "../../src/core/config";
import { db } from "../../src/db/client";
import { accounts } from "../../src/modules/accounts/schema";
import { auditEntries } from "../../src/modules/audit/schema";
import { runCli } from "../../src/sdk/cli";
import { adminCli } from "../support/admin-cli";
import { ADMIN_PREFIX } from "../../src/modules/admin/routes";
import { serveLocalSocket } from "../../src/modules/admin/local";
import { createOperatorToken } from "../../src/modules/admin/tokens";
import { app, call, newAccount, tokenFor } from "../helpers";

const bootstrap = {
  operator: { kind: "local" as const, name: "local:test", scope: "full" as const },
  address: "unix:test",
};

let full: string;
let read: string;
let account: Awaited<ReturnType<typeof newAccount>>;

const as = (token: string) => ({ authorization: `Bearer ${token}` });

beforeAll(async () => {
  full = (await createOperatorToken(bootstrap, `full-${crypto.randomUUID().slice(0, 6)}`, "full")).token;
  read = (await createOperatorToken(bootstrap, `read-${crypto.randomUUID().slice(0, 6)}`, "read")).token;
  account = await newAccount();
});

async function auditWith(action: string, target: string | null) {
  const answer = await call("GET", `${ADMIN_PREFIX}/audit?limit=500`, { headers: as(full) });
  expect(answer.status).toBe(200);
  return (answer.body.entries as Array<Record<string, any>>).find(
    (entry) => entry.action === action && entry.target === target,
  );
}

describe("audit cursor", () => {
  test("before is exact: above the largest safe integer it is a 400 naming the field, not a 500", async () => {
    for (const cursor of ["9223372036854775807", "9300000000000000000", "99999999999999999"]) {
      const answer = await call("GET", `${ADMIN_PREFIX}/audit?before=${cursor}`, { headers: as(read) });
      expect([cursor, answer.status, answer.body.error?.message?.split(":")[0]]).toEqual([cursor, 400, "query.before"]);
    }
    const largest = await call("GET", `${ADMIN_PREFIX}/audit?before=9007199254740991&limit=1`, { headers: as(read) });
    expect(largest.status).toBe(200);
  });
});

describe("names", () => {
  const evil = "evil\n\u001b[31mred";

  test("every name a person gives refuses control characters with a 400 naming the field", async () => {
    const owner = await newAccount();
    const refusals = [
      ["POST", `${ADMIN_PREFIX}/accounts`, { name: evil }, "name"],
      ["POST", `${ADMIN_PREFIX}/accounts/${owner.accountId}/keys`, { label: evil }, "label"],
      ["POST", `${ADMIN_PREFIX}/operators`, { name: evil, password: "correct horse" }, "name"],
      ["POST", `${ADMIN_PREFIX}/operator-tokens`, { name: "tab\there", scope: "read" }, "name"],
      [
        "POST",
        `${ADMIN_PREFIX}/accounts/${owner.accountId}/webhooks`,
        { url: "http://localhost:9/", description: evil },
        "description",
      ],
      ["POST", `${ADMIN_PREFIX}/operator-tokens`, { name: "c1\u009bcontrol", scope: "read" }, "name"],
    ] as const;
    for (const [method, path, body, field] of refusals) {
      const answer = await call(method, path, { headers: as(full), body });
      expect([path, answer.status, answer.body.error?.message]).toEqual([
        path,
        400,
        `${field}: must not contain control characters (U+0000-U+001F, U+007F-U+009F)`,
      ]);
    }
    const webhook = await call("POST", "/api/v1/webhooks", {
      headers: as(owner.apiKey),
      body: { url: "http://localhost:9/", description: evil },
    });
    expect(webhook.status).toBe(400);
    const token = await call("POST", "/api/v1/misc/generate-token", {
      headers: as(owner.apiKey),
      body: { user: { id: "bob", name: evil } },
    });
    expect([token.status, token.body.error.message]).toEqual([
      400,
      "user.name: must not contain control characters (U+0000-U+001F, U+007F-U+009F)",
    ]);
    // Printable text of every script, emoji and format characters stay names.
    const fine = await call("POST", `${ADMIN_PREFIX}/operator-tokens`, {
      headers: as(full),
      body: { name: `Zoë 東京 \u200d👩‍💻 ${crypto.randomUUID().slice(0, 6)}`, scope: "read" },
    });
    expect(fine.status).toBe(201);
  });

  test("the command lines print a stored name escaped, and --json as it is", async () => {
    // Stored before names were checked, or on the database directly.
    const stored = `${evil}-${crypto.randomUUID().slice(0, 6)}`;
    await createOperatorToken(bootstrap, stored, "read");
    const server = app.listen({ hostname: "127.0.0.1", port: 0 });
    const env = { ...process.env, PARLEY_URL: `http://127.0.0.1:${server.server!.port}`, PARLEY_TOKEN: full };
    try {
      const printed: string[] = [];
      expect(await runCli(["list-operator-tokens"], { env, out: (text) => printed.push(text) })).toBe(0);
      const text = printed.join("\n");
      expect(text).not.toContain("\u001b");
      expect(text).toContain(`evil\\u000a\\u001b[31mred-`);
      const line = text.split("\n").find((candidate) => candidate.includes("evil"))!;
      expect(line).toMatch(/^#\d+ {2}evil.*read/);
      const json: string[] = [];
      expect(await runCli(["list-operator-tokens", "--json"], { env, out: (text) => json.push(text) })).toBe(0);
      expect(JSON.parse(json.join("")).map((token: { name: string }) => token.name)).toContain(stored);
    } finally {
      await server.stop(true);
    }
    const owner = await newAccount();
    await db.update(accounts).set({ name: stored }).where(eq(accounts.id, owner.accountId));
    const listed = adminCli("list-accounts");
    expect(listed.code).toBe(0);
    expect(listed.out).not.toContain("\u001b");
    expect(listed.out).toContain(`${owner.accountId}  evil\\u000a\\u001b[31mred-`);
  });
});

describe("operator tokens", () => {
  test("a full token makes an account whose key works, and the change is in the audit log", async () => {
    const name = `made-${crypto.randomUUID().slice(0, 6)}`;
    const created = await call("POST", `${ADMIN_PREFIX}/accounts`, { body: { name, alg: "ES256" }, headers: as(full) });
    expect(created.status).toBe(201);
    expect(created.body.account.name).toBe(name);
    expect(created.body.account.signing_algorithm).toBe("ES256");
    // The new key works on the public API.
    const token = await tokenFor(created.body.api_key);
    expect(token.split(".")).toHaveLength(3);
    const listed = await call("GET", `${ADMIN_PREFIX}/accounts`, { headers: as(read) });
    expect(listed.status).toBe(200);
    const row = listed.body.accounts.find((candidate: { id: string }) => candidate.id === created.body.account.id);
    expect(row.keys[0].id).toBe(created.body.key_id);
    expect(JSON.stringify(listed.body)).not.toContain(created.body.api_key);

    const entry = await auditWith("create-account", created.body.account.id);
    expect(entry).toBeDefined();
    expect(entry!.actor_kind).toBe("token");
    expect(entry!.actor).toMatch(/^full-/);
    expect(entry!.detail.name).toBe(name);
    expect(JSON.stringify(entry)).not.toContain(created.body.api_key);
  });

  test("a key made and revoked through the API stops working", async () => {
    const key = await call("POST", `${ADMIN_PREFIX}/accounts/${account.accountId}/keys`, {
      body: { label: "ci" },
      headers: as(full),
    });
    expect(key.status).toBe(201);
    expect((await call("GET", "/api/v1/webhooks", { headers: { authorization: key.body.api_key } })).status).toBe(200);
    const revoked = await call("DELETE", `${ADMIN_PREFIX}/keys/${key.body.key_id}`, { headers: as(full) });
    expect(revoked.status).toBe(200);
    expect(revoked.body).toEqual({ revoked: true, key_id: key.body.key_id });
    expect((await call("GET", "/api/v1/webhooks", { headers: { authorization: key.body.api_key } })).status).toBe(401);
    expect(await auditWith("revoke-key", `key:${key.body.key_id}`)).toBeDefined();
  });

  test("a read token may look but not change: 403 before the body is validated", async () => {
    expect((await call("GET", `${ADMIN_PREFIX}/operator-tokens`, { headers: as(read) })).status).toBe(200);
    const refused = await call("POST", `${ADMIN_PREFIX}/accounts`, { body: { name: "never" }, headers: as(read) });
    expect(refused.status).toBe(403);
    expect(refused.body.error.code).toBe("forbidden");
    // A body no schema accepts still gets the 403, not a 400 telling the schema.
    const malformed = await call("POST", `${ADMIN_PREFIX}/accounts`, { body: { wrong: 1 }, headers: as(read) });
    expect(malformed.status).toBe(403);
  });

  test("a revoked token is refused with 401 at once; the revocation is audited", async () => {
    const made = await call("POST", `${ADMIN_PREFIX}/operator-tokens`, {
      body: { name: "short-lived", scope: "full" },
      headers: as(full),
    });
    expect(made.status).toBe(201);
    expect(made.body.token).toStartWith("pop_");
    expect((await call("GET", `${ADMIN_PREFIX}/accounts`, { headers: as(made.body.token) })).status).toBe(200);
    const listed = await call("GET", `${ADMIN_PREFIX}/operator-tokens`, { headers: as(full) });
    const summary = listed.body.tokens.find((token: { id: number }) => token.id === made.body.id);
    expect(summary.last_used_at).not.toBeNull();
    expect(JSON.stringify(listed.body)).not.toContain(made.body.token);

    expect(
      (await call("DELETE", `${ADMIN_PREFIX}/operator-tokens/${made.body.id}`, { headers: as(full) })).status,
    ).toBe(200);
    const refused = await call("GET", `${ADMIN_PREFIX}/accounts`, { headers: as(made.body.token) });
    expect(refused.status).toBe(401);
    expect(refused.body.error.code).toBe("invalid_operator_token");
    expect(
      (await call("DELETE", `${ADMIN_PREFIX}/operator-tokens/${made.body.id}`, { headers: as(full) })).status,
    ).toBe(404);

    const created = await auditWith("create-operator-token", `token:${made.body.id}`);
    expect(created!.detail).toEqual({ name: "short-lived", scope: "full", prefix: made.body.token.slice(0, 10) });
    expect(await auditWith("revoke-operator-token", `token:${made.body.id}`)).toBeDefined();
  });

  test("the audit log pages newest first", async () => {
    for (let i = 0; i < 3; i++) {
      const set = await call("PUT", `${ADMIN_PREFIX}/accounts/${account.accountId}/limits/requests.usage`, {
        body: { value: 10 + i },
        headers: as(full),
      });
      expect(set.status).toBe(200);
      expect(set.body.limits.find((limit: { name: string }) => limit.name === "requests.usage")).toMatchObject({
        value: 10 + i,
        overridden: true,
      });
    }
    const first = await call("GET", `${ADMIN_PREFIX}/audit?limit=2`, { headers: as(read) });
    expect(first.body.entries).toHaveLength(2);
    expect(first.body.entries[0].detail.value).toBe(12);
    expect(first.body.entries[1].detail.value).toBe(11);
    const second = await call("GET", `${ADMIN_PREFIX}/audit?limit=2&before=${first.body.next_before}`, {
      headers: as(read),
    });
    expect(second.body.entries[0].detail.value).toBe(10);
    expect(second.body.entries[0].id).toBeLessThan(first.body.entries[1].id);
  });
});

describe("every command", () => {
  test("numbers, Jitsi domain, signing keys, operators, webhooks and refold, each with its audit entry", async () => {
    const base = `${ADMIN_PREFIX}/accounts/${account.accountId}`;
    const send = async (method: string, path: string, body?: unknown) => {
      const answer = await call(method, path, { headers: as(full), body });
      if (answer.status >= 300) throw new Error(`${method} ${path}: ${answer.status} ${JSON.stringify(answer.body)}`);
      return answer.body;
    };

    expect(await send("PUT", `${base}/jitsi-domain`, { domain: "Meet.Example.com" })).toEqual({
      account_id: account.accountId,
      jitsi_domain: "meet.example.com",
    });

    const first = await send("POST", `${base}/numbers`, { country: "us", number: "+1 555 0100", toll_free: true });
    const second = await send("POST", `${base}/numbers`, { country: "DE", number: "+49 30 1234567", default: true });
    expect(first).toMatchObject({
      country_code: "US",
      formatted_number: "+1 555 0100",
      toll_free: true,
      is_default: false,
    });
    expect((await send("GET", `${base}/numbers`)).numbers.map((number: { id: number }) => number.id)).toEqual([
      second.id,
      first.id,
    ]);
    expect(await send("POST", `${ADMIN_PREFIX}/numbers/${first.id}/default`)).toMatchObject({
      id: first.id,
      is_default: true,
    });
    expect(await send("DELETE", `${ADMIN_PREFIX}/numbers/${second.id}`)).toMatchObject({
      removed: true,
      id: second.id,
    });
    expect((await call("DELETE", `${ADMIN_PREFIX}/numbers/${second.id}`, { headers: as(full) })).status).toBe(404);

    const rotated = await send("POST", `${base}/signing-keys`, { alg: "RS256" });
    const revoked = await send("DELETE", `${ADMIN_PREFIX}/signing-keys/${rotated.kid}`);
    expect(revoked).toMatchObject({ revoked: true, account_id: account.accountId, kid: rotated.kid });
    expect(revoked.new_kid).toBeString();

    const operatorName = `op-${crypto.randomUUID().slice(0, 6)}`;
    const operator = await send("POST", `${ADMIN_PREFIX}/operators`, { name: operatorName, password: "correct horse" });
    expect(
      (await send("GET", `${ADMIN_PREFIX}/operators`)).operators.map((row: { name: string }) => row.name),
    ).toContain(operatorName);
    expect(
      (
        await call("POST", `${ADMIN_PREFIX}/operators`, {
          headers: as(full),
          body: { name: operatorName, password: "correct horse" },
        })
      ).status,
    ).toBe(409);

    const hook = await send("POST", `${base}/webhooks`, {
      url: "http://127.0.0.1:9/parley?token=s3cret",
      event_types: ["room.started"],
    });
    expect(hook.secret).toStartWith("whsec_");
    expect((await send("GET", `${base}/webhooks`)).webhooks.map((endpoint: { id: string }) => endpoint.id)).toEqual([
      hook.endpoint.id,
    ]);
    expect(
      await send("PATCH", `${base}/webhooks/${hook.endpoint.id}`, { description: "ops", enabled: false }),
    ).toMatchObject({ description: "ops", enabled: false });
    const newSecret = await send("POST", `${base}/webhooks/${hook.endpoint.id}/rotate-secret`);
    expect(newSecret.secret).not.toBe(hook.secret);
    expect(await send("POST", `${base}/webhooks/${hook.endpoint.id}/replay`, { after: 0 })).toEqual({ queued: 0 });
    expect(await send("DELETE", `${base}/webhooks/${hook.endpoint.id}`)).toEqual({
      removed: true,
      webhook_id: hook.endpoint.id,
    });

    const refolded = await send("POST", `${ADMIN_PREFIX}/refold-usage`, { account_id: account.accountId });
    expect(refolded.events).toBe(0);

    const log = JSON.stringify((await send("GET", `${ADMIN_PREFIX}/audit?limit=500`)).entries);
    for (const action of [
      "set-jitsi-domain",
      "add-number",
      "set-default-number",
      "remove-number",
      "rotate-key",
      "revoke-signing-key",
      "add-webhook",
      "update-webhook",
      "rotate-webhook-secret",
      "replay-webhook",
      "remove-webhook",
      "refold-usage",
    ]) {
      expect(await auditWith(action, account.accountId)).toBeDefined();
    }
    expect(await auditWith("create-operator", `operator:${operator.id}`)).toBeDefined();
    // No secret reaches the log: neither webhook secret nor the operator's password.
    // Nor a webhook URL's query, where receivers often keep a token.
    for (const secret of [hook.secret, newSecret.secret, "correct horse", "s3cret"]) expect(log).not.toContain(secret);
    expect((await auditWith("add-webhook", account.accountId))!.detail.url).toBe(
      `http://127.0.0.1:9/… sha256:${sha256("http://127.0.0.1:9/parley?token=s3cret").slice(0, 8)}`,
    );
  });
});

const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

describe("webhook URLs redacted", () => {
  const slack =
    "http://127.0.0.1:9/services/T0A1B2C3D/B0A1B2C3D/XOXsecretPATH;jsessionid=MATRIXsecret?token=QUERYsecret";
  const secrets = ["XOXsecretPATH", "MATRIXsecret", "QUERYsecret", "services"];

  test("the audit log keeps scheme, host and port and a fingerprint; a read-only token lists them so", async () => {
    const owner = await newAccount();
    const base = `${ADMIN_PREFIX}/accounts/${owner.accountId}/webhooks`;
    const created = await call("POST", base, { headers: as(full), body: { url: slack } });
    expect(created.status).toBe(201);
    const moved = `${slack.replace("9/", "9/other/")}`;
    const updated = await call("PATCH", `${base}/${created.body.endpoint.id}`, {
      headers: as(full),
      body: { url: moved },
    });
    expect(updated.status).toBe(200);
    const added = await auditWith("add-webhook", owner.accountId);
    const changed = await auditWith("update-webhook", owner.accountId);
    expect(added!.detail.url).toBe(`http://127.0.0.1:9/… sha256:${sha256(created.body.endpoint.url).slice(0, 8)}`);
    expect(changed!.detail.url).toBe(`http://127.0.0.1:9/… sha256:${sha256(updated.body.url).slice(0, 8)}`);
    expect(added!.detail.url).not.toBe(changed!.detail.url);

    const readList = await call("GET", base, { headers: as(read) });
    expect(readList.status).toBe(200);
    expect(readList.body.webhooks.map((endpoint: { url: string }) => endpoint.url)).toEqual([changed!.detail.url]);
    const fullList = await call("GET", base, { headers: as(full) });
    expect(fullList.body.webhooks[0].url).toBe(updated.body.url);
    const seenByReader = JSON.stringify([
      readList.body,
      (await call("GET", `${ADMIN_PREFIX}/audit?limit=500`, { headers: as(read) })).body,
    ]);
    for (const secret of secrets) expect(seenByReader).not.toContain(secret);
  });

  test("entries written before keep only scheme, host and port once migrated", async () => {
    const [{ id }] = await db
      .insert(auditEntries)
      .values({
        actor: "local:test",
        actorKind: "local",
        action: "add-webhook",
        target: account.accountId,
        address: "unix:test",
        detail: { webhook_id: "wh_old", url: "https://hooks.slack.com:8443/services/T0/B0/OLDsecret;x=1?…" },
      })
      .returning({ id: auditEntries.id });
    const migration = readFileSync(join(import.meta.dir, "../../drizzle/0031_audit_webhook_urls_redacted.sql"), "utf8");
    await db.execute(sql.raw(migration));
    const [row] = await db.select().from(auditEntries).where(eq(auditEntries.id, id!));
    expect(row!.detail).toEqual({ webhook_id: "wh_old", url: "https://hooks.slack.com:8443/…" });
  });
});

describe("credentials that are not an operator's", () => {
  /** Every admin route, with its path parameters filled in. */
  const adminRoutes = () =>
    app.routes
      .filter((route) => route.path.startsWith(`${ADMIN_PREFIX}/`))
      .map((route) => ({
        method: route.method,
        path: route.path.replace(/:[A-Za-z]+/g, (name) => (name === ":id" ? "1" : "x")),
      }));

  test("the sweep covers every command", () => {
    const routes = adminRoutes().map((route) => `${route.method} ${route.path}`);
    // One route per command of the command line, the token routes, and the audit log.
    expect(routes.length).toBe(26);
    for (const expected of [
      "POST /api/v1/admin/accounts",
      "PUT /api/v1/admin/accounts/1/limits/x",
      "POST /api/v1/admin/refold-usage",
      "GET /api/v1/admin/audit",
    ]) {
      expect(routes).toContain(expected);
    }
  });

  test("the OpenAPI description lists every admin route under its tag, secured by the operator token", async () => {
    const description = (await call("GET", "/swagger/json")).body;
    expect(description.components.securitySchemes.operatorToken).toMatchObject({ type: "http", scheme: "bearer" });
    const operations = Object.entries(
      description.paths as Record<string, Record<string, { tags?: string[]; security?: unknown }>>,
    )
      .filter(([path]) => path.startsWith(`${ADMIN_PREFIX}/`))
      .flatMap(([path, methods]) =>
        Object.entries(methods).map(([method, operation]) => ({
          route: `${method.toUpperCase()} ${path}`,
          tags: operation.tags,
          security: operation.security,
        })),
      );
    expect(operations).toHaveLength(adminRoutes().length);
    for (const operation of operations)
      expect(operation).toEqual({ route: operation.route, tags: ["admin"], security: [{ operatorToken: [] }] });
  });

  test("an account's API key, its token, a forged header, a bad token or none: 401 on every admin route", async () => {
    const userToken = await tokenFor(account.apiKey);
    const credentials: Record<string, Record<string, string>> = {
      none: {},
      "API key raw": { authorization: account.apiKey },
      "API key as Bearer": { authorization: `Bearer ${account.apiKey}` },
      "API key as Basic": {
        authorization: `Basic ${Buffer.from(`${account.accountId}:${account.apiKey}`).toString("base64")}`,
      },
      "end-user token": { authorization: `Bearer ${userToken}` },
      "unknown operator token": { authorization: "Bearer pop_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" },
      "operator token without Bearer": { authorization: full },
      "local headers forged": {
        "x-forwarded-for": "127.0.0.1",
        "x-parley-local": "1",
        "x-real-ip": "127.0.0.1",
        forwarded: "for=unix",
      },
    };
    const wrong: string[] = [];
    for (const route of adminRoutes()) {
      for (const [what, headers] of Object.entries(credentials)) {
        // A body no schema accepts: the credential must be refused before validation looks at it.
        const answer = await call(route.method, route.path, {
          headers,
          ...(route.method === "GET" ? {} : { body: { unexpected: true } }),
        });
        const expected = what === "unknown operator token" ? "invalid_operator_token" : "operator_credential_required";
        if (answer.status !== 401 || answer.body?.error?.code !== expected)
          wrong.push(`${route.method} ${route.path} with ${what}: ${answer.status} ${JSON.stringify(answer.body)}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  test("a read token on every changing route: 403", async () => {
    const wrong: string[] = [];
    for (const route of adminRoutes().filter((candidate) => candidate.method !== "GET")) {
      const answer = await call(route.method, route.path, { headers: as(read), body: { unexpected: true } });
      if (answer.status !== 403) wrong.push(`${route.method} ${route.path}: ${answer.status}`);
    }
    expect(wrong).toEqual([]);
  });
});

describe("the local socket in this process", () => {
  async function inDataDir<T>(dataDir: string, run: () => Promise<T>): Promise<T> {
    const restore = overrideConfig({ database: { dataDir } });
    try {
      return await run();
    } finally {
      restore();
    }
  }

  test("made in a data folder that does not exist yet, 0600, and gone after stop", async () => {
    const parent = mkdtempSync(join(tmpdir(), "parley-socket-"));
    const dataDir = join(parent, "data");
    try {
      const socket = await inDataDir(dataDir, () => serveLocalSocket((request) => app.handle(request)));
      expect(socket).toBeDefined();
      expect(statSync(socket!.path).mode & 0o777).toBe(0o600);
      const answer = await fetch("http://localhost/api/v1/admin/operator-tokens", { unix: socket!.path });
      expect(answer.status).toBe(200);
      await socket!.stop();
      expect(existsSync(socket!.path)).toBe(false);
    } finally {
      rmSync(parent, { recursive: true, force: true });
    }
  });

  test("a file that is no socket is left alone, and a socket that cannot be made is no crash", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "parley-socket-"));
    try {
      writeFileSync(join(dataDir, "parley.sock"), "an operator's file");
      expect(await inDataDir(dataDir, () => serveLocalSocket((request) => app.handle(request)))).toBeUndefined();
      expect(readFileSync(join(dataDir, "parley.sock"), "utf8")).toBe("an operator's file");

      // A data folder whose parent is a file cannot be made.
      const underFile = join(dataDir, "parley.sock", "data");
      expect(await inDataDir(underFile, () => serveLocalSocket((request) => app.handle(request)))).toBeUndefined();
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
