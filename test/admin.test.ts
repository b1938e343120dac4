/**
 * The `parley` command line in direct mode (no Parley running: it opens the database itself),
 * as an operator runs it: output, exit codes, the audit log, and effect on the API.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import { and, eq } from "drizzle-orm";
import { db } from "../src/db/client";
import { listenForInvalidations } from "../src/modules/accounts/service";
import { auditEntries } from "../src/modules/audit/schema";
import { operators } from "../src/modules/operators/schema";
import { call } from "./helpers";
import { eventually } from "./support/wait";
import { adminCli, adminCliWithInput } from "./support/admin-cli";

describe("parley in direct mode", () => {
  // As in every API process: cached keys are dropped when the admin command broadcasts.
  beforeAll(() => listenForInvalidations());

  test("create-account prints the key once; list never shows it; revoke and rotate take effect", async () => {
    const created = adminCli("create-account", "Acme", "--alg", "ES256");
    expect(created.code).toBe(0);
    const accountId = /account\s+(acc_\w+)/.exec(created.out)![1]!;
    const apiKey = /api key\s+(prl_\w+)/.exec(created.out)![1]!;
    expect((await call("POST", "/api/v1/misc/generate-token", { body: { apiKey } })).status).toBe(200);

    const second = adminCli("create-key", accountId, "--label", "ci");
    expect(second.code).toBe(0);
    const secondKey = /(prl_\w+)/.exec(second.out)![1]!;
    const secondId = /#(\d+)/.exec(second.out)![1]!;

    const listed = adminCli("list-accounts", "--json");
    expect(listed.code).toBe(0);
    expect(listed.out).not.toContain(apiKey);
    expect(listed.out).not.toContain(secondKey);
    const account = JSON.parse(listed.out).find((row: { id: string }) => row.id === accountId);
    expect(account.keys.map((key: { label: string }) => key.label)).toEqual(["default", "ci"]);

    // Used once so this process has it cached; the revocation must still reach it.
    expect((await call("POST", "/api/v1/misc/generate-token", { body: { apiKey: secondKey } })).status).toBe(200);
    expect(adminCli("revoke-key", secondId).code).toBe(0);
    const refused = async () =>
      (await call("POST", "/api/v1/misc/generate-token", { body: { apiKey: secondKey } })).status === 401;
    expect(await eventually(refused)).toBe(true);
    expect(adminCli("revoke-key", secondId).code).toBe(1);

    const rotated = adminCli("rotate-key", accountId, "--alg", "EdDSA");
    expect(rotated.code).toBe(0);
    const signsWithEdDSA = async () => {
      const token = (await call("POST", "/api/v1/misc/generate-token", { body: { apiKey } })).body.token as string;
      return JSON.parse(atob(token.split(".")[0]!)).alg === "EdDSA";
    };
    expect(await eventually(signsWithEdDSA)).toBe(true);
  }, 30_000);

  test("set-jitsi-domain reaches a caching process; revoke-signing-key stops its tokens and its ASAP key", async () => {
    const created = adminCli("create-account", "Jitsi", "--alg", "RS256");
    const accountId = /account\s+(acc_\w+)/.exec(created.out)![1]!;
    const apiKey = /api key\s+(prl_\w+)/.exec(created.out)![1]!;
    const kid = /kid (\w+)/.exec(created.out)![1]!;
    const mediaSub = async () => {
      const token = (await call("POST", "/api/v1/misc/generate-token", { body: { apiKey, scope: "media" } })).body
        .token as string;
      return JSON.parse(atob(token.split(".")[1]!.replaceAll("-", "+").replaceAll("_", "/"))).sub as string;
    };
    expect(await mediaSub()).toBe("*");
    const set = adminCli("set-jitsi-domain", accountId, "meet.example.com");
    expect(set.code).toBe(0);
    expect(await eventually(async () => (await mediaSub()) === "meet.example.com")).toBe(true);
    expect(adminCli("set-jitsi-domain", accountId, "no spaces allowed").code).toBe(1);
    expect(adminCli("set-jitsi-domain", accountId).code).toBe(2);

    const asap = `/api/v1/jitsi/asap-keys/${new Bun.CryptoHasher("sha256").update(kid).digest("hex")}.pem`;
    expect((await call("GET", asap)).status).toBe(200);
    const revoked = adminCli("revoke-signing-key", kid);
    expect(revoked.code).toBe(0);
    expect(revoked.out).toContain("new current key");
    expect((await call("GET", asap)).status).toBe(404);
    expect(adminCli("list-accounts").out).toContain(`signing ${kid}  RS256  revoked`);
    expect(adminCli("revoke-signing-key", "no-such-kid").code).toBe(1);
  }, 30_000);

  test("a change leaves the admin API's audit entry, by the local operator in direct mode", async () => {
    const created = adminCli("create-account", "Audited");
    expect(created.code).toBe(0);
    const accountId = /account\s+(acc_\w+)/.exec(created.out)![1]!;
    expect(adminCli("set-limit", accountId, "requests.scheduler", "7").code).toBe(0);
    const entries = await db.select().from(auditEntries).where(eq(auditEntries.target, accountId));
    const actor = `local:${process.getuid!()}:direct`;
    expect(entries.map(({ action, actor, actorKind }) => ({ action, actor, actorKind }))).toEqual([
      { action: "create-account", actor, actorKind: "local" },
      { action: "set-limit", actor, actorKind: "local" },
    ]);
    expect(entries[1]!.detail).toEqual({ name: "requests.scheduler", value: 7 });
    // The same log the running Parley's entries go to, read by the same command.
    const audit = adminCli("audit", "--json");
    expect(audit.code).toBe(0);
    expect(JSON.parse(audit.out).entries).toContainEqual(
      expect.objectContaining({ actor, action: "set-limit", target: accountId }),
    );
    // A read changes nothing and is not recorded.
    expect(adminCli("show-limits", accountId).code).toBe(0);
    const after = await db
      .select()
      .from(auditEntries)
      .where(and(eq(auditEntries.target, accountId), eq(auditEntries.actor, actor)));
    expect(after).toHaveLength(2);
  }, 30_000);

  test("misuse exits 2 with the usage; an unknown account exits 1", () => {
    expect(adminCli().code).toBe(2);
    expect(adminCli("frobnicate").code).toBe(2);
    expect(adminCli("create-account", "x", "--alg", "HS256").code).toBe(2);
    const unknown = adminCli("rotate-key", "acc_missing");
    expect(unknown.code).toBe(1);
    expect(unknown.err).toContain("no account acc_missing");
  }, 30_000);
});

describe("parley create-operator in direct mode", () => {
  const withPassword = (password: string, ...args: string[]) =>
    adminCliWithInput(`${password}\n`, "create-operator", ...args);

  test("reads the password from stdin, stores only its hash, and the operator can sign in", async () => {
    const name = `op-${crypto.randomUUID().slice(0, 6)}`;
    const made = withPassword("a long enough password", name);
    expect(made.code).toBe(0);
    expect(made.out).toContain(`${name}: sign in at /console`);
    expect(made.out.includes("a long enough password")).toBe(false);
    const [stored] = await db.select().from(operators).where(eq(operators.name, name));
    expect(stored!.passwordHash).toStartWith("$argon2id$");
    const login = await call("POST", "/console/api/login", { body: { name, password: "a long enough password" } });
    expect(login.status).toBe(200);
    expect(login.body).toMatchObject({ kind: "operator", name, account_id: null });
    expect(login.headers.get("set-cookie")).toMatch(
      /^parley_console=[\w-]+\.[\w-]+\.[\w-]+; Path=\/console; HttpOnly; SameSite=Strict/,
    );
  });

  test("refuses a second operator of the same name, a short password and a missing name", () => {
    const name = `op-${crypto.randomUUID().slice(0, 6)}`;
    expect(withPassword("a long enough password", name).code).toBe(0);
    expect(withPassword("another long password", name)).toMatchObject({
      code: 1,
      err: expect.stringContaining("exists already"),
    });
    expect(withPassword("short", `x${name}`)).toMatchObject({
      code: 1,
      err: expect.stringContaining("password: Expected string length greater or equal to 8"),
    });
    expect(withPassword("a long enough password").code).toBe(2);
  });
});
